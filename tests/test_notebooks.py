"""The Colab notebook runs end to end (smoke size) with nbclient and defines no library code."""

import json
from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "01_tiny_spade.ipynb"


def test_notebook_defines_no_library_code():
  cells = json.loads(NOTEBOOK.read_text())["cells"]
  source = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
  assert "import spade_jax" in source or "from spade_jax" in source
  assert "\ndef " not in "\n" + source and "\nclass " not in "\n" + source


def test_notebook_executes_at_smoke_size(tmp_path, monkeypatch):
  monkeypatch.setenv("SPADE_NOTEBOOK_SMOKE", "1")
  monkeypatch.setenv("SPADE_NOTEBOOK_WORKDIR", str(tmp_path / "run"))
  nb = nbformat.read(NOTEBOOK, as_version=4)
  NotebookClient(
    nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
  ).execute()
  outputs = "".join(
    o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
  )
  assert "generated programs valid" in outputs
  assert any(
    "image/png" in o.get("data", {}) for c in nb.cells if c.cell_type == "code" for o in c.outputs
  )
  assert (tmp_path / "run" / "metrics.jsonl").exists()
