"""Span and attribute names: the one definition that services emit and the evaluation queries.

GenAI semantic conventions where they exist (`gen_ai.*`), `strata.*` for the rest.
"""

# Span names, one per hop of the request path.
SPAN_GATEWAY_GENERATE = "strata.gateway.generate"
SPAN_SCHEDULER_ROUTE = "strata.scheduler.route"
SPAN_NODE_SUBMIT = "strata.node.submit"
SPAN_NODE_QUEUE = "strata.node.queue"
SPAN_WORKER_GENERATE = "strata.worker.generate"
SPAN_WORKER_PREFILL = "strata.worker.prefill"
SPAN_KV_LOAD = "strata.kv.load"
SPAN_KV_OFFLOAD = "strata.kv.offload"
SPAN_PLACEMENT_REPLAN = "strata.placement.replan"

# GenAI semantic conventions.
GEN_AI_SYSTEM = "gen_ai.system"
GEN_AI_OPERATION = "gen_ai.operation.name"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
GEN_AI_REQUEST_TEMPERATURE = "gen_ai.request.temperature"
GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
GEN_AI_RESPONSE_ID = "gen_ai.response.id"

# Strata attributes.
TENANT = "strata.tenant"
REQUEST_ID = "strata.request.id"
NODE_ID = "strata.node.id"
REPLICA_ID = "strata.replica.id"
TTFT_MS = "strata.latency.ttft_ms"
TPOT_MS = "strata.latency.tpot_ms"
E2E_MS = "strata.latency.e2e_ms"
QUEUE_MS = "strata.latency.queue_ms"
# Percentiles of one request's inter-token gaps, measured at the gateway as tokens stream out.
ITL_P50_MS = "strata.latency.itl_p50_ms"
ITL_P95_MS = "strata.latency.itl_p95_ms"
ITL_P99_MS = "strata.latency.itl_p99_ms"
CACHED_TOKENS = "strata.usage.cached_input_tokens"
TIER_TOKENS = "strata.usage.tier_input_tokens"
KV_BLOCKS = "strata.kv.blocks"
# Routing by prefix: leading prompt blocks the chosen node holds, and a peer store named to pull
# a longer prefix from (absent when none).
ROUTE_CACHED_BLOCKS = "strata.route.cached_blocks"
ROUTE_PROMPT_BLOCKS = "strata.route.prompt_blocks"
ROUTE_KV_SOURCE = "strata.route.kv_source"
ROUTE_KV_SOURCE_BLOCKS = "strata.route.kv_source_blocks"
ROUTE_ESTIMATED_TTFT_MS = "strata.route.estimated_ttft_ms"
# Routed by the gateway from its last view of the pool, no scheduler answering.
ROUTE_STALE = "strata.route.stale"
RETRY_AFTER_METADATA = "retry-after-ms"  # trailing metadata of RESOURCE_EXHAUSTED answers
# Trailing metadata of a scheduler's refusal: why (burst | pool_full | sla | partition).
REFUSAL_REASON_METADATA = "x-strata-refusal-reason"
# A request's metadata (gRPC) or header (HTTP): a lower SLA class than its key's, for this call.
SLA_CLASS_METADATA = "x-strata-sla-class"
ROUTE_REFUSED = "strata.route.refused"  # burst | pool_full | sla | partition
# An SLA refusal's terms (strata.policy.scheduling.admission.TtftEstimate), on its route span,
# beside ROUTE_ESTIMATED_TTFT_MS (the estimate judged) and NODE_ID (the replica's node).
ROUTE_SLOT_WAIT_MS = "strata.route.slot_wait_ms"
ROUTE_AHEAD_MS = "strata.route.ahead_ms"
ROUTE_OWN_PREFILL_MS = "strata.route.own_prefill_ms"
ROUTE_OBSERVED_MS = "strata.route.observed_ms"
ROUTE_SOLO_MS = "strata.route.solo_ms"
ROUTE_ALLOWED_TTFT_MS = "strata.route.allowed_ttft_ms"
ROUTE_HELD_SEQS = "strata.route.held_seqs"
ROUTE_QUEUED_AHEAD = "strata.route.queued_ahead"
ROUTE_LENT_MS = "strata.route.lent_ms"
SLA_CLASS = "strata.sla_class"
PRIORITY = "strata.priority"
ERROR_CODE = "strata.error.code"
# Sparse long-context decode, on the worker span: layer steps a request ran on the sparse path
# and those the trust check sent back to full attention (absent: the worker has no sparse path).
SPARSE_LAYER_STEPS = "strata.sparse.layer_steps"
SPARSE_FALLBACKS = "strata.sparse.fallbacks"
# The evaluation run a request belongs to (from the caller's `x-strata-run-id` metadata).
RUN_ID = "strata.run.id"
RUN_ID_METADATA = "x-strata-run-id"

SYSTEM_NAME = "strata"
