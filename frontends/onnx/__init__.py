"""ONNX frontend: ``import_onnx`` turns an ONNX model into one session's view of one beat in the
`wave` dialect (importer.py), folding everything static (fold.py, builder.py) and lowering runtime
ops through the table in lowering.py (filled by ops_*.py)."""

from wavec.frontends.onnx.importer import ImportedGraph, import_onnx

__all__ = ["ImportedGraph", "import_onnx"]
