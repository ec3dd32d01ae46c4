# llmdiag's image: the wheel built from this repository, installed in a slim Python image, run as a
# non-root user. Nothing is written outside /tmp (HOME is /tmp): the image runs with
# readOnlyRootFilesystem and an emptyDir on /tmp (deploy/helm/llmdiag, deploy/*.yaml).
#   docker build -t llmdiag:0.2.0 .
# The same steps run without a container in tests/test_container_image.py.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY diag ./diag
COPY rules ./rules
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM ${PYTHON_IMAGE}
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HOME=/tmp
COPY --from=wheel /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
USER 65532:65532
WORKDIR /tmp
ENTRYPOINT ["llmdiag"]
CMD ["--help"]
