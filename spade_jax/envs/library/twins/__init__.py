"""Python twins of the library programs: standalone environment modules (DESIGN.md section 5)."""
