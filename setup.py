"""The build: pure Python by default; with BATCHSIM_COMPILE=1, the hot modules listed in
`sim/compiled.py` are compiled with mypyc (see that module)."""

import os
import runpy

from setuptools import setup

compiled = runpy.run_path(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "sim", "compiled.py")
)
ext_modules = []
if os.environ.get(compiled["ENV"]) == "1":
    from mypyc.build import mypycify

    # only the listed modules are read: what they import from elsewhere (numpy, SimPy, the rest
    # of sim) is typed Any, so the build needs no other package and no versions of their stubs;
    # `mypy sim` in CI checks the types, this only compiles
    ext_modules = mypycify(
        [
            "--config-file=",
            "--follow-imports=skip",
            "--ignore-missing-imports",
            *compiled["MODULES"],
        ],
        opt_level="3",
        debug_level="0",
        multi_file=True,
    )

setup(ext_modules=ext_modules, options={"build_ext": {"parallel": os.cpu_count() or 1}})
