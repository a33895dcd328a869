"""Package layout that pyproject.toml cannot state: the top-level ``migrations/`` folder is
installed as ``app.migrations`` (``package_dir``), so that the installed distribution has one
top-level package, ``app``, and Alembic's scripts travel inside it. Everything else is in
pyproject.toml.
"""

from setuptools import find_packages, setup

MIGRATIONS = {"app.migrations": "migrations", "app.migrations.versions": "migrations/versions"}

setup(
    packages=[*find_packages(include=["app", "app.*"]), *MIGRATIONS],
    package_dir=MIGRATIONS,
)
