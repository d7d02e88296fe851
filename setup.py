"""What pyproject.toml cannot say: the repository's ``kernels/`` folder ships inside the package.

``[tool.setuptools.packages.find]`` only finds folders under ``ddbench/``, so the package list and the
mapping ``ddbench.kernel_sources`` → ``kernels/`` are given here; everything else (metadata, the
package-data globs) stays in pyproject.toml.
"""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["ddbench", "ddbench.*"]), "ddbench.kernel_sources"],
    package_dir={"ddbench.kernel_sources": "kernels"},
)
