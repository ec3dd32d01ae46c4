"""The CEL evaluator of common-expression-language (its Rust extension, `cel.cel`), loaded without
the package's REPL.

`import cel` runs the package's __init__, which imports its command-line REPL (cel.cli) and with it
prompt_toolkit and pygments: ten times the evaluator's own import, paid by every analysis.
The extension is loaded here from the installed package's folder and registered as `cel.cel`, so that
a later `import cel` (the package, elsewhere) finds it and does not load it a second time. Where the
package is laid out otherwise, `import cel` is used as it is.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

_NAME = "cel.cel"


def _evaluator() -> ModuleType:
    loaded = sys.modules.get(_NAME)
    if loaded is not None:
        return loaded
    package = importlib.util.find_spec("cel")  # finds the package without running its __init__
    folders = package.submodule_search_locations if package is not None else None
    for folder in folders or []:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = Path(folder) / f"cel{suffix}"
            if not path.is_file():
                continue
            spec = importlib.util.spec_from_file_location(_NAME, path)
            if spec is None or spec.loader is None:
                continue
            module = importlib.util.module_from_spec(spec)
            sys.modules[_NAME] = module
            try:
                spec.loader.exec_module(module)
            except BaseException:
                del sys.modules[_NAME]
                raise
            return module
    import cel  # another layout: the package as it is

    return cel


if TYPE_CHECKING:
    from cel import cel  # the extension's own stubs (cel/cel.pyi)
else:
    cel = _evaluator()
