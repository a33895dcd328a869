"""Alembic migrations of calmon's database (run through ``calmon migrate``)."""
