"""The ``sealbox`` command: one module per command group, imported lazily."""
