"""Default addresses and names shared by services, supervisor, compose and clients (one definition).

Each service listens on STRATA_<SERVICE>_BIND and is reached by others at STRATA_<SERVICE>_ADDR;
both default to the loopback address below. Compose sets them to service names.
"""

GATEWAY_ADDR = "127.0.0.1:50051"
GATEWAY_HTTP_ADDR = "127.0.0.1:8000"  # the OpenAI HTTP API, /health, /ready, /metrics
SCHEDULER_ADDR = "127.0.0.1:50052"
NODE_ADDR = "127.0.0.1:50053"
KVSTORE_ADDR = "127.0.0.1:50054"
PLACEMENT_ADDR = "127.0.0.1:50055"
METRICS_ADDR = "127.0.0.1:50056"
OTLP_ADDR = "127.0.0.1:50057"  # the metrics collector's OTLP/gRPC TraceService receiver
# Prometheus /metrics of the services without an HTTP port (the gateway's is GATEWAY_HTTP_ADDR).
NODE_PROMETHEUS_ADDR = "127.0.0.1:9101"
KVSTORE_PROMETHEUS_ADDR = "127.0.0.1:9102"
SCHEDULER_PROMETHEUS_ADDR = "127.0.0.1:9103"
PLACEMENT_PROMETHEUS_ADDR = "127.0.0.1:9104"
METRICS_PROMETHEUS_ADDR = "127.0.0.1:9105"
WORKER_BASE_PORT = 50100  # node managers give workers ports from here up

DEFAULT_MODEL = "smollm2-135m-instruct"
DEMO_TENANT = "demo"
DEMO_KEY_FILE = "demo_api_key"  # in the data dir; the CLI reads it when no key is given
ADMIN_KEY_FILE = "admin_key"  # in the data dir; the gateway's Admin API key (0600)

HEARTBEAT_INTERVAL_S = 1.0
NODE_TTL_S = 5.0  # a node silent for this long leaves routing
