"""Interop: export bundles, OpenTelemetry (OTLP) export, importers of traces recorded elsewhere.

Each format lives in its own module (``sealbox.interop.otlp``, ...), imported only when used.
"""
