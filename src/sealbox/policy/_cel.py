"""The CEL engine (``common-expression-language``) without its command-line tool.

``import cel`` runs the package's ``__init__``, which imports ``cel.cli``: typer,
prompt_toolkit and pygments, ≈ 0.35 s of CPU on a 2-core machine (0.4–0.6 s wall
under load), paid by every process that loads a policy (``sealbox gateway serve``,
``sealbox policy check``, the condition worker). Sealbox uses only the compiled
extension ``cel.cel`` (``compile``, ``Program``, ``Context``, ``evaluate``), which
loads in ≈ 10 ms. This module loads that extension by itself, registered as
``cel.cel`` in :data:`sys.modules`, so a later ``import cel`` (by a user, or by
the package's own ``from .cel import *``) reuses the same module and the same
classes. If the extension cannot be found that way (another layout of the
package), it falls back to ``import cel``.

``cel`` here is a module with the package's engine API (``cel.compile(source) ->
Program``, ``Program.execute(Context) -> value``); errors are those of the package.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from types import ModuleType

__all__ = ["cel"]


def _load() -> ModuleType:
    loaded = sys.modules.get("cel.cel")
    if loaded is not None:
        return loaded
    if "cel" in sys.modules:  # the package is already imported: its engine is cel.cel
        import cel.cel as engine

        return engine
    package = importlib.util.find_spec("cel")
    locations = list(package.submodule_search_locations or []) if package is not None else []
    for location in locations:
        finder = importlib.machinery.FileFinder(
            location, (importlib.machinery.ExtensionFileLoader, importlib.machinery.EXTENSION_SUFFIXES))
        spec = finder.find_spec("cel.cel")
        if spec is None or spec.loader is None:
            continue
        module = importlib.util.module_from_spec(spec)
        sys.modules["cel.cel"] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            sys.modules.pop("cel.cel", None)
            raise
        return module
    import cel as whole  # pragma: no cover - another layout of the package

    return whole


cel = _load()
