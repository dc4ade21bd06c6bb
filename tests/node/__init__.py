"""Tests that run pyengine under Pyodide in Node (run_pyodide.mjs, beside them), whatever stage they check."""
