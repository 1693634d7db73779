# olstream: one image for every command (`olstream source|worker|sink|status|log simulate ...`).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
COPY pyproject.toml README.md ./
COPY avro ./avro
COPY olstream ./olstream
COPY connectors ./connectors
COPY streams ./streams
COPY infra/kafka/pom.xml ./infra/kafka/pom.xml
COPY infra/mirror/pom.xml ./infra/mirror/pom.xml
COPY infra/marquez/pom.xml ./infra/marquez/pom.xml
COPY infra/marquez/marquez.yml ./infra/marquez/marquez.yml
# the runtime only: no `[local]` extra (graphviz for `olstream graph`); every dependency is a wheel
RUN pip install .

RUN useradd --system --uid 10001 --home-dir /var/lib/olstream --create-home olstream
USER olstream
WORKDIR /var/lib/olstream
# the metrics endpoint (--metrics-port 9100 in docker-compose.yml) on every interface of the container
ENV OLSTREAM_METRICS_HOST=0.0.0.0
EXPOSE 9100
ENTRYPOINT ["olstream"]
CMD ["--help"]
