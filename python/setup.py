"""Builds the tandem package with the project's CMake build, for pip (python/pyproject.toml).

The extension module is built as the normal build builds it (python/CMakeLists.txt), in
the build directory TANDEM_BUILD_DIR, by default the repository's build/ (configured as a
Release build when it is not yet); `cmake --install --component python` then lays out the
package (the extension, the Python files, the oracle's twin) and setuptools packs it. So a
`pip install` after a build compiles nothing again, and one on a fresh tree builds what the
package needs and no more (the CLI and the tests are not built)."""
import glob
import os
import shutil
import subprocess
import sys
import tempfile

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD_DIR = os.path.abspath(os.environ.get("TANDEM_BUILD_DIR") or os.path.join(ROOT, "build"))


def cmake(*args):
    print("tandem: cmake " + " ".join(args), flush=True)
    subprocess.run(["cmake", *args], check=True)


class CMakeBuild(build_ext):
    def run(self):
        if not os.path.exists(os.path.join(BUILD_DIR, "CMakeCache.txt")):
            generator = ["-G", "Ninja"] if shutil.which("ninja") else []
            cmake("-S", ROOT, "-B", BUILD_DIR, *generator, "-DCMAKE_BUILD_TYPE=Release",
                  "-DTANDEM_PYTHON_EXECUTABLE=" + sys.executable)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
        cmake("--build", BUILD_DIR, "--target", "_tandem", "--parallel", jobs)
        with tempfile.TemporaryDirectory(prefix="tandem-install-") as staging:
            cmake("--install", BUILD_DIR, "--component", "python", "--prefix", staging)
            found = glob.glob(os.path.join(staging, "**", "tandem", "__init__.py"), recursive=True)
            if len(found) != 1:
                raise RuntimeError("cmake --install laid out no tandem package under " + staging)
            target = os.path.join(os.path.abspath(self.build_lib), "tandem")
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(os.path.dirname(found[0]), target)
        built = os.path.join(target, os.path.basename(self.get_ext_fullpath("tandem._tandem")))
        if not os.path.exists(built):
            raise RuntimeError("the build made no %s: was %s configured for another Python than %s?"
                               % (os.path.basename(built), BUILD_DIR, sys.executable))


setup(
    packages=["tandem"],
    ext_modules=[Extension("tandem._tandem", sources=[])],  # built by CMake: a platform wheel
    cmdclass={"build_ext": CMakeBuild},
    # setuptools' own files in the build directory, not beside the sources
    options={"build": {"build_base": os.path.join(BUILD_DIR, "pip")}, "egg_info": {"egg_base": BUILD_DIR}},
)
