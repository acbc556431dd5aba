"""The top-level package: cheap to import, ``ayo.App`` resolved on first use."""

import subprocess
import sys


def test_import_ayo_is_light_and_app_is_lazy():
    code = (
        "import sys, ayo; assert 'torch' not in sys.modules, 'import ayo loaded torch'; "
        "from ayo.runtime.app import App; assert ayo.App is App; print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok"
