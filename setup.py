"""Package layout that pyproject.toml cannot state: the top-level ``migrations/`` folder is
installed as ``calmon.migrations`` (``package_dir``), so that the installed distribution has one
top-level package, ``calmon``, and Alembic's scripts travel inside it. Everything else is in
pyproject.toml.
"""

from setuptools import find_packages, setup

MIGRATIONS = {
    "calmon.migrations": "migrations",
    "calmon.migrations.versions": "migrations/versions",
}

setup(
    packages=[*find_packages(include=["calmon", "calmon.*"]), *MIGRATIONS],
    package_dir=MIGRATIONS,
)
