"""Typed settings: switchyard.yaml loaded and validated, and process logging. Imports no package of ours."""
