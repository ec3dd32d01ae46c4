# llmdiag's image: the wheel built from this repository, installed into a virtualenv of Debian's own
# Python, run as a non-root user. Nothing is written outside /tmp (HOME is /tmp): the image runs with
# readOnlyRootFilesystem and an emptyDir on /tmp (deploy/helm/llmdiag, deploy/*.yaml).
#   docker build -t llmdiag:0.2.0 .
# Without a Docker daemon, ci/image/build.py builds the same image from the same lines (the Debian
# release and packages, the virtualenv, ENV, USER, WORKDIR, ENTRYPOINT and CMD are read from here):
# mmdebstrap, our wheel, an OCI image layout; tests/live/test_image.py runs it with crun.
ARG DEBIAN_IMAGE=debian:bookworm-slim

FROM ${DEBIAN_IMAGE} AS wheel
RUN apt-get update && apt-get install -y --no-install-recommends python3 python3-venv && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/llmdiag
ENV PATH=/opt/llmdiag/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
WORKDIR /src
COPY pyproject.toml README.md ./
COPY diag ./diag
COPY rules ./rules
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM ${DEBIAN_IMAGE}
RUN apt-get update && apt-get install -y --no-install-recommends python3 python3-venv && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/llmdiag
ENV PATH=/opt/llmdiag/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HOME=/tmp
COPY --from=wheel /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
USER 65532:65532
WORKDIR /tmp
ENTRYPOINT ["llmdiag"]
CMD ["--help"]
