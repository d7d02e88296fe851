"""Importing this module arms the serving plugin in this process when DDBENCH_APPLY is not off: the route
for SGLang versions without a plugin system (`ddbench apply install-hook` writes the .pth file that imports
it at every interpreter start).

The hook is installed the moment SGLang's extend-attention module has executed (an import hook), before
the Triton backend binds the function. Imports no torch until then.
"""

from __future__ import annotations

from ddbench.capture.import_hook import call_after_import
from ddbench.serving.plugin import arm_module
from ddbench.sglang_target import EXTEND_ATTENTION_MODULE

call_after_import(EXTEND_ATTENTION_MODULE, arm_module)
