"""Importing this module arms the capture in this process when DDBENCH_CAPTURE_DIR is set.

The wrapper is installed the moment SGLang's extend-attention module has executed (an import hook), so
every later `from … import extend_attention_fwd` — the Triton backend's, in its `__init__` — binds the
wrapper. The `ddbench-capture.pth` file (`ddbench capture install-hook`) imports this module at the start
of every Python process of the environment, which is how SGLang's TP worker processes get it too.
Nothing here may break the process: bad settings and failures are logged and capture stays off.
"""

from __future__ import annotations

import logging
import os
from types import ModuleType
from typing import Any

from ddbench.capture.config import config_from_env
from ddbench.capture.import_hook import call_after_import
from ddbench.sglang_target import EXTEND_ATTENTION_MODULE

TARGET_MODULE = EXTEND_ATTENTION_MODULE

log = logging.getLogger("ddbench.capture")


def _install(module: ModuleType, config: dict[str, Any]) -> None:
    from ddbench.capture.installer import install

    install(module=module, scan_objects=False, **config)  # nothing can have bound it yet


def _refuse(module: ModuleType, problem: str) -> None:
    log.error("ddbench capture: not armed: %s", problem)


def arm() -> bool:
    """Install now or on import, per the environment; True when capture is armed.

    The .pth hook imports this in every Python process of the environment (pip, editors, test runners):
    a bad DDBENCH_CAPTURE_* setting is reported once, in the process that imports SGLang's attention
    module (where the capture would have acted), and stays silent everywhere else.
    """
    try:
        config = config_from_env(os.environ)
    except ValueError as err:
        problem = str(err)
        call_after_import(TARGET_MODULE, lambda module: _refuse(module, problem))
        return False
    if config is None:
        return False
    call_after_import(TARGET_MODULE, lambda module: _install(module, config))
    return True


armed = arm()
