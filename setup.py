"""Builds steermoe._core with the project's CMake (target steermoe_core) and packages
python/steermoe. Used by `pip install .` (see pyproject.toml)."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build = Path(self.build_temp) / "cmake"
        build.mkdir(parents=True, exist_ok=True)
        subprocess.run(["cmake", "-S", str(ROOT), "-B", str(build), "-G", "Ninja",
                        "-DCMAKE_BUILD_TYPE=Release", "-DSTEERMOE_PYTHON=ON",
                        "-DSTEERMOE_TESTS=OFF", "-DSTEERMOE_BENCH=OFF",
                        f"-DSTEERMOE_PYTHON_EXECUTABLE={sys.executable}"], check=True)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", "2")
        subprocess.run(["cmake", "--build", str(build), "--target", "steermoe_core", "-j", jobs],
                       check=True)
        built = next((build / "python" / "steermoe").glob("_core*.so"))
        dest = Path(self.get_ext_fullpath(ext.name))
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(built, dest)


setup(
    packages=["steermoe"],
    package_dir={"": "python"},
    ext_modules=[Extension("steermoe._core", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
)
