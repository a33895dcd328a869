# calmon service image: `docker build -t calmon .` (see docs/reference/deployment.md).
# One image for every process: `calmon api` (default), `calmon scheduler`, `calmon migrate`.
# PYTHON_IMAGE: any Debian-based image with python3 3.11+ and its venv module (the official
# python image, a mirror of it, or the Debian base of scripts/docker-base).
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS builder
# The package index pip reads (a mirror or proxy of PyPI); given at build time only, it stays
# out of the runtime image. Every file is checked against the lock's hashes whatever the index.
ARG PIP_INDEX_URL=https://pypi.org/simple
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt
RUN python3 -m venv /opt/build && python3 -m venv /opt/calmon
WORKDIR /src
# Dependencies first, from the lock files alone, so that code changes reuse these layers. The
# runtime lock holds the `arrow` extra (pyarrow): the API takes Arrow IPC stream bodies.
COPY requirements/build.txt requirements/runtime.txt ./requirements/
RUN /opt/build/bin/pip install --require-hashes --no-deps -r requirements/build.txt \
 && /opt/calmon/bin/pip install --require-hashes --no-deps -r requirements/runtime.txt
COPY pyproject.toml setup.py README.md ./
COPY calmon ./calmon
COPY migrations ./migrations
# calmon-client (client/), a dependency of calmon built from this repository: the HTTP client of
# `calmon simulate` and `calmon windows`; its own dependency (httpx) is in the lock.
COPY client ./client
RUN /opt/build/bin/pip wheel --no-deps --no-build-isolation --wheel-dir /wheels ./client . \
 && /opt/calmon/bin/pip install --no-deps --no-index /wheels/calmon-*.whl /wheels/calmon_client-*.whl \
 && /opt/calmon/bin/python -c "import calmon_client" \
 && /opt/calmon/bin/pip uninstall --yes pip setuptools wheel \
 && /opt/calmon/bin/python -c "import importlib.util as u, sys; sys.exit(any(u.find_spec(m) for m in ('pip', 'setuptools', 'wheel')))" \
 && /opt/calmon/bin/calmon --version

FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="calmon" \
      org.opencontainers.image.description="Production model monitoring with prior-calibrated metrics" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PATH=/opt/calmon/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HEALTHCHECK_URL=http://127.0.0.1:8000/healthz
# The official python image installs pip, setuptools and wheel system-wide: none is needed at
# run time (the Debian base of scripts/docker-base has none).
RUN groupadd --system --gid 10001 calmon \
 && useradd --system --uid 10001 --gid calmon --home-dir /var/lib/calmon --create-home \
      --shell /usr/sbin/nologin calmon \
 && for site in /usr/local/lib/python3*/site-packages; do \
      rm -rf "$site"/pip "$site"/pip-* "$site"/setuptools "$site"/setuptools-* \
        "$site"/pkg_resources "$site"/_distutils_hack "$site"/distutils-precedence.pth \
        "$site"/wheel "$site"/wheel-*; \
    done \
 && rm -f /usr/local/bin/pip* /usr/local/bin/wheel \
 && python3 -c "import importlib.util as u, sys; sys.exit(any(u.find_spec(m) for m in ('pip', 'setuptools', 'wheel')))"
COPY --from=builder /opt/calmon /opt/calmon
USER 10001:10001
WORKDIR /var/lib/calmon
# State of the processes (a SQLite database, if used): a volume owned by calmon, which a named
# volume mounted here inherits.
VOLUME /var/lib/calmon
# 8000: API (`calmon api`, `calmon serve`); 9464: scheduler metrics (`calmon scheduler`).
EXPOSE 8000 9464
# Liveness of the process listening at HEALTHCHECK_URL (the scheduler's service sets its
# metrics URL). slim images have no curl: Python's urllib fails on any non-2xx answer.
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen(os.environ['HEALTHCHECK_URL'], timeout=4)"]
ENTRYPOINT ["calmon"]
CMD ["api", "--host", "0.0.0.0", "--port", "8000"]
