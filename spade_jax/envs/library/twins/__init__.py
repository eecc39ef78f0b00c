"""Python twins of the library programs: standalone environment modules (docs/DESIGN.md §3.6)."""
