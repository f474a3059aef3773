"""build_engines."""
