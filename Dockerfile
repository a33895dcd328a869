# syntax=docker/dockerfile:1
# calmon service image: `docker build -t calmon .` (see docs/deployment.md).
# One image for every process: `calmon api` (default), `calmon scheduler`, `calmon migrate`.
ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/calmon/bin:$PATH
RUN python -m venv /opt/calmon
WORKDIR /src
# Dependencies first, read from pyproject.toml alone, so that code changes reuse this layer.
COPY pyproject.toml README.md ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" > requirements.txt \
 && pip install -r requirements.txt
COPY app ./app
COPY migrations ./migrations
RUN pip install --no-deps . && calmon --version

FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="calmon" \
      org.opencontainers.image.description="Production model monitoring with prior-calibrated metrics" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PATH=/opt/calmon/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HEALTHCHECK_URL=http://127.0.0.1:8000/healthz
RUN groupadd --system --gid 10001 calmon \
 && useradd --system --uid 10001 --gid calmon --home-dir /var/lib/calmon --create-home \
      --shell /usr/sbin/nologin calmon
COPY --from=builder /opt/calmon /opt/calmon
USER 10001:10001
WORKDIR /var/lib/calmon
# 8000: API (`calmon api`, `calmon serve`); 9464: scheduler metrics (`calmon scheduler`).
EXPOSE 8000 9464
# Liveness of the process listening at HEALTHCHECK_URL (the scheduler's service sets its
# metrics URL). slim images have no curl: Python's urllib fails on any non-2xx answer.
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen(os.environ['HEALTHCHECK_URL'], timeout=4)"]
ENTRYPOINT ["calmon"]
CMD ["api", "--host", "0.0.0.0", "--port", "8000"]
