# agentlat: one image for the collector (default command), the dashboard, the alert
# evaluator and one-shot tools (migrate, keys). See docs/operations.md.

FROM python:3.12-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/agentlat
WORKDIR /src
COPY pyproject.toml README.md ./
COPY sdk sdk
COPY shared shared
COPY demo demo
COPY collector collector
COPY store store
COPY alerts alerts
COPY dashboard dashboard
COPY budgets budgets
COPY api api
COPY server server
COPY cli cli
RUN /opt/agentlat/bin/pip install '.[server,demo]'

FROM python:3.12-slim
ENV PATH=/opt/agentlat/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    AGENTLAT_WAL=/var/lib/agentlat/wal
RUN groupadd --system --gid 10001 agentlat \
    && useradd --system --uid 10001 --gid agentlat --create-home --home-dir /home/agentlat agentlat \
    && mkdir -p /var/lib/agentlat \
    && chown agentlat:agentlat /var/lib/agentlat
COPY --from=build /opt/agentlat /opt/agentlat
USER agentlat
WORKDIR /var/lib/agentlat
# Each container keeps its own write-ahead log here (an anonymous volume per replica).
VOLUME ["/var/lib/agentlat"]
# OTLP/gRPC, OTLP/HTTP + query API, dashboard
EXPOSE 4317 4318 8501
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:4318/readyz', timeout=4)"]
CMD ["agentlat", "serve", "--host", "0.0.0.0"]
