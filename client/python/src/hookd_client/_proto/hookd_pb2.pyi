from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class BackpressureLevel(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BACKPRESSURE_LEVEL_UNSPECIFIED: _ClassVar[BackpressureLevel]
    BACKPRESSURE_LEVEL_OK: _ClassVar[BackpressureLevel]
    BACKPRESSURE_LEVEL_SOFT: _ClassVar[BackpressureLevel]
    BACKPRESSURE_LEVEL_HARD: _ClassVar[BackpressureLevel]

class BreakerState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BREAKER_STATE_UNSPECIFIED: _ClassVar[BreakerState]
    BREAKER_STATE_CLOSED: _ClassVar[BreakerState]
    BREAKER_STATE_OPEN: _ClassVar[BreakerState]
    BREAKER_STATE_HALF_OPEN: _ClassVar[BreakerState]

class MessageState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MESSAGE_STATE_UNSPECIFIED: _ClassVar[MessageState]
    MESSAGE_STATE_PENDING: _ClassVar[MessageState]
    MESSAGE_STATE_AWAITING_RETRY: _ClassVar[MessageState]
    MESSAGE_STATE_IN_FLIGHT: _ClassVar[MessageState]
    MESSAGE_STATE_DEAD_LETTER: _ClassVar[MessageState]
    MESSAGE_STATE_DELIVERED: _ClassVar[MessageState]
    MESSAGE_STATE_EXPIRED: _ClassVar[MessageState]

class ReplayJobState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REPLAY_JOB_STATE_UNSPECIFIED: _ClassVar[ReplayJobState]
    REPLAY_JOB_STATE_RUNNING: _ClassVar[ReplayJobState]
    REPLAY_JOB_STATE_PAUSED: _ClassVar[ReplayJobState]
    REPLAY_JOB_STATE_CANCELLED: _ClassVar[ReplayJobState]
    REPLAY_JOB_STATE_DONE: _ClassVar[ReplayJobState]

class ReplayJobAction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REPLAY_JOB_ACTION_UNSPECIFIED: _ClassVar[ReplayJobAction]
    REPLAY_JOB_ACTION_PAUSE: _ClassVar[ReplayJobAction]
    REPLAY_JOB_ACTION_RESUME: _ClassVar[ReplayJobAction]
    REPLAY_JOB_ACTION_CANCEL: _ClassVar[ReplayJobAction]

class Fifo(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FIFO_OFF: _ClassVar[Fifo]
    FIFO_BLOCK: _ClassVar[Fifo]
    FIFO_PARK: _ClassVar[Fifo]
BACKPRESSURE_LEVEL_UNSPECIFIED: BackpressureLevel
BACKPRESSURE_LEVEL_OK: BackpressureLevel
BACKPRESSURE_LEVEL_SOFT: BackpressureLevel
BACKPRESSURE_LEVEL_HARD: BackpressureLevel
BREAKER_STATE_UNSPECIFIED: BreakerState
BREAKER_STATE_CLOSED: BreakerState
BREAKER_STATE_OPEN: BreakerState
BREAKER_STATE_HALF_OPEN: BreakerState
MESSAGE_STATE_UNSPECIFIED: MessageState
MESSAGE_STATE_PENDING: MessageState
MESSAGE_STATE_AWAITING_RETRY: MessageState
MESSAGE_STATE_IN_FLIGHT: MessageState
MESSAGE_STATE_DEAD_LETTER: MessageState
MESSAGE_STATE_DELIVERED: MessageState
MESSAGE_STATE_EXPIRED: MessageState
REPLAY_JOB_STATE_UNSPECIFIED: ReplayJobState
REPLAY_JOB_STATE_RUNNING: ReplayJobState
REPLAY_JOB_STATE_PAUSED: ReplayJobState
REPLAY_JOB_STATE_CANCELLED: ReplayJobState
REPLAY_JOB_STATE_DONE: ReplayJobState
REPLAY_JOB_ACTION_UNSPECIFIED: ReplayJobAction
REPLAY_JOB_ACTION_PAUSE: ReplayJobAction
REPLAY_JOB_ACTION_RESUME: ReplayJobAction
REPLAY_JOB_ACTION_CANCEL: ReplayJobAction
FIFO_OFF: Fifo
FIFO_BLOCK: Fifo
FIFO_PARK: Fifo

class Destination(_message.Message):
    __slots__ = ("endpoint", "url", "queue")
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    endpoint: str
    url: str
    queue: str
    def __init__(self, endpoint: _Optional[str] = ..., url: _Optional[str] = ..., queue: _Optional[str] = ...) -> None: ...

class EnqueueRequest(_message.Message):
    __slots__ = ("endpoint", "url", "queue", "topic", "payload", "idempotency_key", "event_type", "headers", "delay_ms", "max_attempts", "retry_base_ms", "retry_cap_ms", "ordering_key")
    class HeadersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    EVENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    RETRY_BASE_MS_FIELD_NUMBER: _ClassVar[int]
    RETRY_CAP_MS_FIELD_NUMBER: _ClassVar[int]
    ORDERING_KEY_FIELD_NUMBER: _ClassVar[int]
    endpoint: str
    url: str
    queue: str
    topic: str
    payload: bytes
    idempotency_key: str
    event_type: str
    headers: _containers.ScalarMap[str, str]
    delay_ms: int
    max_attempts: int
    retry_base_ms: int
    retry_cap_ms: int
    ordering_key: str
    def __init__(self, endpoint: _Optional[str] = ..., url: _Optional[str] = ..., queue: _Optional[str] = ..., topic: _Optional[str] = ..., payload: _Optional[bytes] = ..., idempotency_key: _Optional[str] = ..., event_type: _Optional[str] = ..., headers: _Optional[_Mapping[str, str]] = ..., delay_ms: _Optional[int] = ..., max_attempts: _Optional[int] = ..., retry_base_ms: _Optional[int] = ..., retry_cap_ms: _Optional[int] = ..., ordering_key: _Optional[str] = ...) -> None: ...

class EnqueueResponse(_message.Message):
    __slots__ = ("id", "duplicate", "throttle_ms", "subscribers", "delivery_ids")
    ID_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    THROTTLE_MS_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIBERS_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_IDS_FIELD_NUMBER: _ClassVar[int]
    id: str
    duplicate: bool
    throttle_ms: int
    subscribers: int
    delivery_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, id: _Optional[str] = ..., duplicate: _Optional[bool] = ..., throttle_ms: _Optional[int] = ..., subscribers: _Optional[int] = ..., delivery_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class EnqueueBatchRequest(_message.Message):
    __slots__ = ("events",)
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[EnqueueRequest]
    def __init__(self, events: _Optional[_Iterable[_Union[EnqueueRequest, _Mapping]]] = ...) -> None: ...

class EnqueueResult(_message.Message):
    __slots__ = ("ok", "error")
    OK_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ok: EnqueueResponse
    error: Error
    def __init__(self, ok: _Optional[_Union[EnqueueResponse, _Mapping]] = ..., error: _Optional[_Union[Error, _Mapping]] = ...) -> None: ...

class Error(_message.Message):
    __slots__ = ("code", "message", "retry_after_ms")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_MS_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    retry_after_ms: int
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ..., retry_after_ms: _Optional[int] = ...) -> None: ...

class EnqueueBatchResponse(_message.Message):
    __slots__ = ("results", "throttle_ms")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    THROTTLE_MS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[EnqueueResult]
    throttle_ms: int
    def __init__(self, results: _Optional[_Iterable[_Union[EnqueueResult, _Mapping]]] = ..., throttle_ms: _Optional[int] = ...) -> None: ...

class ReceiveRequest(_message.Message):
    __slots__ = ("queue", "max_messages", "visibility_timeout_ms", "wait_ms")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    VISIBILITY_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    queue: str
    max_messages: int
    visibility_timeout_ms: int
    wait_ms: int
    def __init__(self, queue: _Optional[str] = ..., max_messages: _Optional[int] = ..., visibility_timeout_ms: _Optional[int] = ..., wait_ms: _Optional[int] = ...) -> None: ...

class ReceivedMessage(_message.Message):
    __slots__ = ("id", "lease_id", "payload", "event_type", "headers", "idempotency_key", "attempt", "max_attempts", "enqueued_unix_ms", "lease_deadline_unix_ms", "event_id", "ordering_key", "sequence", "out_of_order")
    class HeadersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    EVENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    ENQUEUED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    LEASE_DEADLINE_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    ORDERING_KEY_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    OUT_OF_ORDER_FIELD_NUMBER: _ClassVar[int]
    id: str
    lease_id: str
    payload: bytes
    event_type: str
    headers: _containers.ScalarMap[str, str]
    idempotency_key: str
    attempt: int
    max_attempts: int
    enqueued_unix_ms: int
    lease_deadline_unix_ms: int
    event_id: str
    ordering_key: str
    sequence: int
    out_of_order: bool
    def __init__(self, id: _Optional[str] = ..., lease_id: _Optional[str] = ..., payload: _Optional[bytes] = ..., event_type: _Optional[str] = ..., headers: _Optional[_Mapping[str, str]] = ..., idempotency_key: _Optional[str] = ..., attempt: _Optional[int] = ..., max_attempts: _Optional[int] = ..., enqueued_unix_ms: _Optional[int] = ..., lease_deadline_unix_ms: _Optional[int] = ..., event_id: _Optional[str] = ..., ordering_key: _Optional[str] = ..., sequence: _Optional[int] = ..., out_of_order: _Optional[bool] = ...) -> None: ...

class ReceiveResponse(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[ReceivedMessage]
    def __init__(self, messages: _Optional[_Iterable[_Union[ReceivedMessage, _Mapping]]] = ...) -> None: ...

class AckRequest(_message.Message):
    __slots__ = ("lease_ids",)
    LEASE_IDS_FIELD_NUMBER: _ClassVar[int]
    lease_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, lease_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class AckResponse(_message.Message):
    __slots__ = ("acked",)
    ACKED_FIELD_NUMBER: _ClassVar[int]
    acked: int
    def __init__(self, acked: _Optional[int] = ...) -> None: ...

class NackRequest(_message.Message):
    __slots__ = ("lease_id", "delay_ms", "reason")
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    lease_id: str
    delay_ms: int
    reason: str
    def __init__(self, lease_id: _Optional[str] = ..., delay_ms: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class NackResponse(_message.Message):
    __slots__ = ("dead_lettered", "next_attempt_unix_ms")
    DEAD_LETTERED_FIELD_NUMBER: _ClassVar[int]
    NEXT_ATTEMPT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    dead_lettered: bool
    next_attempt_unix_ms: int
    def __init__(self, dead_lettered: _Optional[bool] = ..., next_attempt_unix_ms: _Optional[int] = ...) -> None: ...

class StatsRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class LatencyStats(_message.Message):
    __slots__ = ("count", "p50_ms", "p95_ms", "p99_ms", "p999_ms", "max_ms")
    COUNT_FIELD_NUMBER: _ClassVar[int]
    P50_MS_FIELD_NUMBER: _ClassVar[int]
    P95_MS_FIELD_NUMBER: _ClassVar[int]
    P99_MS_FIELD_NUMBER: _ClassVar[int]
    P999_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_MS_FIELD_NUMBER: _ClassVar[int]
    count: int
    p50_ms: float
    p95_ms: float
    p99_ms: float
    p999_ms: float
    max_ms: float
    def __init__(self, count: _Optional[int] = ..., p50_ms: _Optional[float] = ..., p95_ms: _Optional[float] = ..., p99_ms: _Optional[float] = ..., p999_ms: _Optional[float] = ..., max_ms: _Optional[float] = ...) -> None: ...

class DestinationStats(_message.Message):
    __slots__ = ("destination", "pending", "awaiting_retry", "in_flight", "dead_letter", "delivered_last_hour", "failed_last_hour", "oldest_pending_age_ms", "enqueue_rate_per_s", "completion_rate_per_s", "latency_last_hour", "latency_last_24h", "push", "waiting_receives", "live_bytes", "backpressure", "fifo_lanes", "blocked_lanes")
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    AWAITING_RETRY_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTER_FIELD_NUMBER: _ClassVar[int]
    DELIVERED_LAST_HOUR_FIELD_NUMBER: _ClassVar[int]
    FAILED_LAST_HOUR_FIELD_NUMBER: _ClassVar[int]
    OLDEST_PENDING_AGE_MS_FIELD_NUMBER: _ClassVar[int]
    ENQUEUE_RATE_PER_S_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_RATE_PER_S_FIELD_NUMBER: _ClassVar[int]
    LATENCY_LAST_HOUR_FIELD_NUMBER: _ClassVar[int]
    LATENCY_LAST_24H_FIELD_NUMBER: _ClassVar[int]
    PUSH_FIELD_NUMBER: _ClassVar[int]
    WAITING_RECEIVES_FIELD_NUMBER: _ClassVar[int]
    LIVE_BYTES_FIELD_NUMBER: _ClassVar[int]
    BACKPRESSURE_FIELD_NUMBER: _ClassVar[int]
    FIFO_LANES_FIELD_NUMBER: _ClassVar[int]
    BLOCKED_LANES_FIELD_NUMBER: _ClassVar[int]
    destination: str
    pending: int
    awaiting_retry: int
    in_flight: int
    dead_letter: int
    delivered_last_hour: int
    failed_last_hour: int
    oldest_pending_age_ms: int
    enqueue_rate_per_s: float
    completion_rate_per_s: float
    latency_last_hour: LatencyStats
    latency_last_24h: LatencyStats
    push: PushStats
    waiting_receives: int
    live_bytes: int
    backpressure: BackpressureLevel
    fifo_lanes: int
    blocked_lanes: int
    def __init__(self, destination: _Optional[str] = ..., pending: _Optional[int] = ..., awaiting_retry: _Optional[int] = ..., in_flight: _Optional[int] = ..., dead_letter: _Optional[int] = ..., delivered_last_hour: _Optional[int] = ..., failed_last_hour: _Optional[int] = ..., oldest_pending_age_ms: _Optional[int] = ..., enqueue_rate_per_s: _Optional[float] = ..., completion_rate_per_s: _Optional[float] = ..., latency_last_hour: _Optional[_Union[LatencyStats, _Mapping]] = ..., latency_last_24h: _Optional[_Union[LatencyStats, _Mapping]] = ..., push: _Optional[_Union[PushStats, _Mapping]] = ..., waiting_receives: _Optional[int] = ..., live_bytes: _Optional[int] = ..., backpressure: _Optional[_Union[BackpressureLevel, str]] = ..., fifo_lanes: _Optional[int] = ..., blocked_lanes: _Optional[int] = ...) -> None: ...

class PushStats(_message.Message):
    __slots__ = ("disabled", "disabled_reason", "breaker", "breaker_open_until_unix_ms", "breaker_cooldown_ms", "breaker_openings", "consecutive_failures", "paused_until_unix_ms", "in_flight", "max_in_flight", "rate_limit_per_s", "slow", "attempts_last_hour", "success_rate_last_hour", "attempt_latency_last_hour", "attempt_latency_last_24h")
    DISABLED_FIELD_NUMBER: _ClassVar[int]
    DISABLED_REASON_FIELD_NUMBER: _ClassVar[int]
    BREAKER_FIELD_NUMBER: _ClassVar[int]
    BREAKER_OPEN_UNTIL_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    BREAKER_COOLDOWN_MS_FIELD_NUMBER: _ClassVar[int]
    BREAKER_OPENINGS_FIELD_NUMBER: _ClassVar[int]
    CONSECUTIVE_FAILURES_FIELD_NUMBER: _ClassVar[int]
    PAUSED_UNTIL_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    MAX_IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    RATE_LIMIT_PER_S_FIELD_NUMBER: _ClassVar[int]
    SLOW_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_LAST_HOUR_FIELD_NUMBER: _ClassVar[int]
    SUCCESS_RATE_LAST_HOUR_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_LATENCY_LAST_HOUR_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_LATENCY_LAST_24H_FIELD_NUMBER: _ClassVar[int]
    disabled: bool
    disabled_reason: str
    breaker: BreakerState
    breaker_open_until_unix_ms: int
    breaker_cooldown_ms: int
    breaker_openings: int
    consecutive_failures: int
    paused_until_unix_ms: int
    in_flight: int
    max_in_flight: int
    rate_limit_per_s: float
    slow: bool
    attempts_last_hour: int
    success_rate_last_hour: float
    attempt_latency_last_hour: LatencyStats
    attempt_latency_last_24h: LatencyStats
    def __init__(self, disabled: _Optional[bool] = ..., disabled_reason: _Optional[str] = ..., breaker: _Optional[_Union[BreakerState, str]] = ..., breaker_open_until_unix_ms: _Optional[int] = ..., breaker_cooldown_ms: _Optional[int] = ..., breaker_openings: _Optional[int] = ..., consecutive_failures: _Optional[int] = ..., paused_until_unix_ms: _Optional[int] = ..., in_flight: _Optional[int] = ..., max_in_flight: _Optional[int] = ..., rate_limit_per_s: _Optional[float] = ..., slow: _Optional[bool] = ..., attempts_last_hour: _Optional[int] = ..., success_rate_last_hour: _Optional[float] = ..., attempt_latency_last_hour: _Optional[_Union[LatencyStats, _Mapping]] = ..., attempt_latency_last_24h: _Optional[_Union[LatencyStats, _Mapping]] = ...) -> None: ...

class StorageStats(_message.Message):
    __slots__ = ("commits_per_s", "requests_per_commit", "commit_latency_last_hour", "live_messages", "queued_write_bytes", "destinations", "log_bytes", "checkpoint_age_ms", "last_checkpoint_ms", "replay_ms", "replayed_bytes", "log_since_checkpoint_bytes", "disk_available_bytes", "disk_reserve_bytes", "log_segments", "log_live_bytes", "log_retained_from_unix_ms", "log_reclaimable_bytes", "log_compacting_segments", "log_compacted_records", "log_deleted_segments", "log_freed_bytes", "purge_pending_records", "purged_records", "purged_bytes")
    COMMITS_PER_S_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_PER_COMMIT_FIELD_NUMBER: _ClassVar[int]
    COMMIT_LATENCY_LAST_HOUR_FIELD_NUMBER: _ClassVar[int]
    LIVE_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    QUEUED_WRITE_BYTES_FIELD_NUMBER: _ClassVar[int]
    DESTINATIONS_FIELD_NUMBER: _ClassVar[int]
    LOG_BYTES_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_AGE_MS_FIELD_NUMBER: _ClassVar[int]
    LAST_CHECKPOINT_MS_FIELD_NUMBER: _ClassVar[int]
    REPLAY_MS_FIELD_NUMBER: _ClassVar[int]
    REPLAYED_BYTES_FIELD_NUMBER: _ClassVar[int]
    LOG_SINCE_CHECKPOINT_BYTES_FIELD_NUMBER: _ClassVar[int]
    DISK_AVAILABLE_BYTES_FIELD_NUMBER: _ClassVar[int]
    DISK_RESERVE_BYTES_FIELD_NUMBER: _ClassVar[int]
    LOG_SEGMENTS_FIELD_NUMBER: _ClassVar[int]
    LOG_LIVE_BYTES_FIELD_NUMBER: _ClassVar[int]
    LOG_RETAINED_FROM_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    LOG_RECLAIMABLE_BYTES_FIELD_NUMBER: _ClassVar[int]
    LOG_COMPACTING_SEGMENTS_FIELD_NUMBER: _ClassVar[int]
    LOG_COMPACTED_RECORDS_FIELD_NUMBER: _ClassVar[int]
    LOG_DELETED_SEGMENTS_FIELD_NUMBER: _ClassVar[int]
    LOG_FREED_BYTES_FIELD_NUMBER: _ClassVar[int]
    PURGE_PENDING_RECORDS_FIELD_NUMBER: _ClassVar[int]
    PURGED_RECORDS_FIELD_NUMBER: _ClassVar[int]
    PURGED_BYTES_FIELD_NUMBER: _ClassVar[int]
    commits_per_s: float
    requests_per_commit: float
    commit_latency_last_hour: LatencyStats
    live_messages: int
    queued_write_bytes: int
    destinations: int
    log_bytes: int
    checkpoint_age_ms: int
    last_checkpoint_ms: int
    replay_ms: int
    replayed_bytes: int
    log_since_checkpoint_bytes: int
    disk_available_bytes: int
    disk_reserve_bytes: int
    log_segments: int
    log_live_bytes: int
    log_retained_from_unix_ms: int
    log_reclaimable_bytes: int
    log_compacting_segments: int
    log_compacted_records: int
    log_deleted_segments: int
    log_freed_bytes: int
    purge_pending_records: int
    purged_records: int
    purged_bytes: int
    def __init__(self, commits_per_s: _Optional[float] = ..., requests_per_commit: _Optional[float] = ..., commit_latency_last_hour: _Optional[_Union[LatencyStats, _Mapping]] = ..., live_messages: _Optional[int] = ..., queued_write_bytes: _Optional[int] = ..., destinations: _Optional[int] = ..., log_bytes: _Optional[int] = ..., checkpoint_age_ms: _Optional[int] = ..., last_checkpoint_ms: _Optional[int] = ..., replay_ms: _Optional[int] = ..., replayed_bytes: _Optional[int] = ..., log_since_checkpoint_bytes: _Optional[int] = ..., disk_available_bytes: _Optional[int] = ..., disk_reserve_bytes: _Optional[int] = ..., log_segments: _Optional[int] = ..., log_live_bytes: _Optional[int] = ..., log_retained_from_unix_ms: _Optional[int] = ..., log_reclaimable_bytes: _Optional[int] = ..., log_compacting_segments: _Optional[int] = ..., log_compacted_records: _Optional[int] = ..., log_deleted_segments: _Optional[int] = ..., log_freed_bytes: _Optional[int] = ..., purge_pending_records: _Optional[int] = ..., purged_records: _Optional[int] = ..., purged_bytes: _Optional[int] = ...) -> None: ...

class StatsResponse(_message.Message):
    __slots__ = ("total", "destinations", "uptime_ms", "storage", "next_page_token", "alerts", "quotas", "replay_jobs", "retention")
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    DESTINATIONS_FIELD_NUMBER: _ClassVar[int]
    UPTIME_MS_FIELD_NUMBER: _ClassVar[int]
    STORAGE_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    ALERTS_FIELD_NUMBER: _ClassVar[int]
    QUOTAS_FIELD_NUMBER: _ClassVar[int]
    REPLAY_JOBS_FIELD_NUMBER: _ClassVar[int]
    RETENTION_FIELD_NUMBER: _ClassVar[int]
    total: DestinationStats
    destinations: _containers.RepeatedCompositeFieldContainer[DestinationStats]
    uptime_ms: int
    storage: StorageStats
    next_page_token: str
    alerts: _containers.RepeatedCompositeFieldContainer[AlertState]
    quotas: _containers.RepeatedCompositeFieldContainer[QuotaUse]
    replay_jobs: _containers.RepeatedCompositeFieldContainer[ReplayJob]
    retention: RetentionStats
    def __init__(self, total: _Optional[_Union[DestinationStats, _Mapping]] = ..., destinations: _Optional[_Iterable[_Union[DestinationStats, _Mapping]]] = ..., uptime_ms: _Optional[int] = ..., storage: _Optional[_Union[StorageStats, _Mapping]] = ..., next_page_token: _Optional[str] = ..., alerts: _Optional[_Iterable[_Union[AlertState, _Mapping]]] = ..., quotas: _Optional[_Iterable[_Union[QuotaUse, _Mapping]]] = ..., replay_jobs: _Optional[_Iterable[_Union[ReplayJob, _Mapping]]] = ..., retention: _Optional[_Union[RetentionStats, _Mapping]] = ...) -> None: ...

class RetentionStats(_message.Message):
    __slots__ = ("retention_secs", "server_completed_retention_secs", "server_log_retention_secs", "disk_budget_bytes", "payloads_kept_since_unix_ms", "destinations")
    RETENTION_SECS_FIELD_NUMBER: _ClassVar[int]
    SERVER_COMPLETED_RETENTION_SECS_FIELD_NUMBER: _ClassVar[int]
    SERVER_LOG_RETENTION_SECS_FIELD_NUMBER: _ClassVar[int]
    DISK_BUDGET_BYTES_FIELD_NUMBER: _ClassVar[int]
    PAYLOADS_KEPT_SINCE_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    DESTINATIONS_FIELD_NUMBER: _ClassVar[int]
    retention_secs: int
    server_completed_retention_secs: int
    server_log_retention_secs: int
    disk_budget_bytes: int
    payloads_kept_since_unix_ms: int
    destinations: _containers.RepeatedCompositeFieldContainer[DestinationRetention]
    def __init__(self, retention_secs: _Optional[int] = ..., server_completed_retention_secs: _Optional[int] = ..., server_log_retention_secs: _Optional[int] = ..., disk_budget_bytes: _Optional[int] = ..., payloads_kept_since_unix_ms: _Optional[int] = ..., destinations: _Optional[_Iterable[_Union[DestinationRetention, _Mapping]]] = ...) -> None: ...

class DestinationRetention(_message.Message):
    __slots__ = ("destination", "retention_secs", "payloads_kept_since_unix_ms")
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    RETENTION_SECS_FIELD_NUMBER: _ClassVar[int]
    PAYLOADS_KEPT_SINCE_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    destination: str
    retention_secs: int
    payloads_kept_since_unix_ms: int
    def __init__(self, destination: _Optional[str] = ..., retention_secs: _Optional[int] = ..., payloads_kept_since_unix_ms: _Optional[int] = ...) -> None: ...

class QuotaUse(_message.Message):
    __slots__ = ("quota", "used", "limit")
    QUOTA_FIELD_NUMBER: _ClassVar[int]
    USED_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    quota: str
    used: int
    limit: int
    def __init__(self, quota: _Optional[str] = ..., used: _Optional[int] = ..., limit: _Optional[int] = ...) -> None: ...

class AlertState(_message.Message):
    __slots__ = ("alert", "destination", "level", "since_unix_ms", "value", "warning", "critical")
    ALERT_FIELD_NUMBER: _ClassVar[int]
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    SINCE_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    WARNING_FIELD_NUMBER: _ClassVar[int]
    CRITICAL_FIELD_NUMBER: _ClassVar[int]
    alert: str
    destination: str
    level: str
    since_unix_ms: int
    value: float
    warning: float
    critical: float
    def __init__(self, alert: _Optional[str] = ..., destination: _Optional[str] = ..., level: _Optional[str] = ..., since_unix_ms: _Optional[int] = ..., value: _Optional[float] = ..., warning: _Optional[float] = ..., critical: _Optional[float] = ...) -> None: ...

class GetMessageRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class SearchMessagesRequest(_message.Message):
    __slots__ = ("destination", "event_type", "event_id", "idempotency_key", "states", "last_status", "created_after_unix_ms", "created_before_unix_ms", "payload", "page_size", "page_token", "count")
    class PayloadEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    EVENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    STATES_FIELD_NUMBER: _ClassVar[int]
    LAST_STATUS_FIELD_NUMBER: _ClassVar[int]
    CREATED_AFTER_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    CREATED_BEFORE_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    destination: Destination
    event_type: str
    event_id: str
    idempotency_key: str
    states: _containers.RepeatedScalarFieldContainer[MessageState]
    last_status: int
    created_after_unix_ms: int
    created_before_unix_ms: int
    payload: _containers.ScalarMap[str, str]
    page_size: int
    page_token: str
    count: bool
    def __init__(self, destination: _Optional[_Union[Destination, _Mapping]] = ..., event_type: _Optional[str] = ..., event_id: _Optional[str] = ..., idempotency_key: _Optional[str] = ..., states: _Optional[_Iterable[_Union[MessageState, str]]] = ..., last_status: _Optional[int] = ..., created_after_unix_ms: _Optional[int] = ..., created_before_unix_ms: _Optional[int] = ..., payload: _Optional[_Mapping[str, str]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., count: _Optional[bool] = ...) -> None: ...

class MessageSummary(_message.Message):
    __slots__ = ("id", "destination", "state", "event_type", "event_id", "idempotency_key", "attempts", "last_status", "enqueued_unix_ms", "completed_unix_ms", "payload_size", "last_error", "last_latency_us")
    ID_FIELD_NUMBER: _ClassVar[int]
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    EVENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    LAST_STATUS_FIELD_NUMBER: _ClassVar[int]
    ENQUEUED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_SIZE_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    LAST_LATENCY_US_FIELD_NUMBER: _ClassVar[int]
    id: str
    destination: Destination
    state: MessageState
    event_type: str
    event_id: str
    idempotency_key: str
    attempts: int
    last_status: int
    enqueued_unix_ms: int
    completed_unix_ms: int
    payload_size: int
    last_error: str
    last_latency_us: int
    def __init__(self, id: _Optional[str] = ..., destination: _Optional[_Union[Destination, _Mapping]] = ..., state: _Optional[_Union[MessageState, str]] = ..., event_type: _Optional[str] = ..., event_id: _Optional[str] = ..., idempotency_key: _Optional[str] = ..., attempts: _Optional[int] = ..., last_status: _Optional[int] = ..., enqueued_unix_ms: _Optional[int] = ..., completed_unix_ms: _Optional[int] = ..., payload_size: _Optional[int] = ..., last_error: _Optional[str] = ..., last_latency_us: _Optional[int] = ...) -> None: ...

class SearchMessagesResponse(_message.Message):
    __slots__ = ("messages", "next_page_token", "scanned", "total", "total_exact")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SCANNED_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    TOTAL_EXACT_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[MessageSummary]
    next_page_token: str
    scanned: int
    total: int
    total_exact: bool
    def __init__(self, messages: _Optional[_Iterable[_Union[MessageSummary, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., scanned: _Optional[int] = ..., total: _Optional[int] = ..., total_exact: _Optional[bool] = ...) -> None: ...

class PurgeMessagesRequest(_message.Message):
    __slots__ = ("search", "ids", "dry_run", "limit", "wait_ms")
    SEARCH_FIELD_NUMBER: _ClassVar[int]
    IDS_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    search: SearchMessagesRequest
    ids: _containers.RepeatedScalarFieldContainer[str]
    dry_run: bool
    limit: int
    wait_ms: int
    def __init__(self, search: _Optional[_Union[SearchMessagesRequest, _Mapping]] = ..., ids: _Optional[_Iterable[str]] = ..., dry_run: _Optional[bool] = ..., limit: _Optional[int] = ..., wait_ms: _Optional[int] = ...) -> None: ...

class PurgeMessagesResponse(_message.Message):
    __slots__ = ("matched", "purged", "dead", "live", "missing", "more", "overwritten", "bytes")
    MATCHED_FIELD_NUMBER: _ClassVar[int]
    PURGED_FIELD_NUMBER: _ClassVar[int]
    DEAD_FIELD_NUMBER: _ClassVar[int]
    LIVE_FIELD_NUMBER: _ClassVar[int]
    MISSING_FIELD_NUMBER: _ClassVar[int]
    MORE_FIELD_NUMBER: _ClassVar[int]
    OVERWRITTEN_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    matched: int
    purged: int
    dead: int
    live: int
    missing: int
    more: bool
    overwritten: bool
    bytes: int
    def __init__(self, matched: _Optional[int] = ..., purged: _Optional[int] = ..., dead: _Optional[int] = ..., live: _Optional[int] = ..., missing: _Optional[int] = ..., more: _Optional[bool] = ..., overwritten: _Optional[bool] = ..., bytes: _Optional[int] = ...) -> None: ...

class ReplayRecovery(_message.Message):
    __slots__ = ("destination", "since_unix_ms", "delivered_statuses")
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    SINCE_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    DELIVERED_STATUSES_FIELD_NUMBER: _ClassVar[int]
    destination: Destination
    since_unix_ms: int
    delivered_statuses: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, destination: _Optional[_Union[Destination, _Mapping]] = ..., since_unix_ms: _Optional[int] = ..., delivered_statuses: _Optional[_Iterable[int]] = ...) -> None: ...

class CreateReplayJobRequest(_message.Message):
    __slots__ = ("ids", "search", "recovery", "dry_run", "max_per_s", "limit", "dead_letters")
    IDS_FIELD_NUMBER: _ClassVar[int]
    SEARCH_FIELD_NUMBER: _ClassVar[int]
    RECOVERY_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    MAX_PER_S_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTERS_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[str]
    search: SearchMessagesRequest
    recovery: ReplayRecovery
    dry_run: bool
    max_per_s: float
    limit: int
    dead_letters: DeadLetterFilter
    def __init__(self, ids: _Optional[_Iterable[str]] = ..., search: _Optional[_Union[SearchMessagesRequest, _Mapping]] = ..., recovery: _Optional[_Union[ReplayRecovery, _Mapping]] = ..., dry_run: _Optional[bool] = ..., max_per_s: _Optional[float] = ..., limit: _Optional[int] = ..., dead_letters: _Optional[_Union[DeadLetterFilter, _Mapping]] = ...) -> None: ...

class ListEndpointEventsRequest(_message.Message):
    __slots__ = ("endpoint", "after", "page_size")
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    endpoint: str
    after: str
    page_size: int
    def __init__(self, endpoint: _Optional[str] = ..., after: _Optional[str] = ..., page_size: _Optional[int] = ...) -> None: ...

class EndpointEvent(_message.Message):
    __slots__ = ("id", "state", "event_type", "created_unix_ms", "payload", "headers", "payload_expired", "attempts")
    class HeadersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    EVENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    CREATED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_EXPIRED_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    id: str
    state: MessageState
    event_type: str
    created_unix_ms: int
    payload: bytes
    headers: _containers.ScalarMap[str, str]
    payload_expired: bool
    attempts: int
    def __init__(self, id: _Optional[str] = ..., state: _Optional[_Union[MessageState, str]] = ..., event_type: _Optional[str] = ..., created_unix_ms: _Optional[int] = ..., payload: _Optional[bytes] = ..., headers: _Optional[_Mapping[str, str]] = ..., payload_expired: _Optional[bool] = ..., attempts: _Optional[int] = ...) -> None: ...

class ListEndpointEventsResponse(_message.Message):
    __slots__ = ("events", "next_cursor", "more")
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_CURSOR_FIELD_NUMBER: _ClassVar[int]
    MORE_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[EndpointEvent]
    next_cursor: str
    more: bool
    def __init__(self, events: _Optional[_Iterable[_Union[EndpointEvent, _Mapping]]] = ..., next_cursor: _Optional[str] = ..., more: _Optional[bool] = ...) -> None: ...

class ReplayEstimate(_message.Message):
    __slots__ = ("count", "dead_letters", "delivered", "live", "bytes", "seconds", "per_s", "truncated", "expired")
    COUNT_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTERS_FIELD_NUMBER: _ClassVar[int]
    DELIVERED_FIELD_NUMBER: _ClassVar[int]
    LIVE_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    PER_S_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    EXPIRED_FIELD_NUMBER: _ClassVar[int]
    count: int
    dead_letters: int
    delivered: int
    live: int
    bytes: int
    seconds: float
    per_s: float
    truncated: bool
    expired: int
    def __init__(self, count: _Optional[int] = ..., dead_letters: _Optional[int] = ..., delivered: _Optional[int] = ..., live: _Optional[int] = ..., bytes: _Optional[int] = ..., seconds: _Optional[float] = ..., per_s: _Optional[float] = ..., truncated: _Optional[bool] = ..., expired: _Optional[int] = ...) -> None: ...

class ReplayJob(_message.Message):
    __slots__ = ("id", "state", "selection", "created_unix_ms", "updated_unix_ms", "finished_unix_ms", "per_s", "total", "replayed", "skipped", "failed", "remaining", "bytes", "last_failure", "eta_unix_ms", "created_by")
    ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    SELECTION_FIELD_NUMBER: _ClassVar[int]
    CREATED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    UPDATED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    FINISHED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    PER_S_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    REPLAYED_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    REMAINING_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    LAST_FAILURE_FIELD_NUMBER: _ClassVar[int]
    ETA_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    CREATED_BY_FIELD_NUMBER: _ClassVar[int]
    id: str
    state: ReplayJobState
    selection: str
    created_unix_ms: int
    updated_unix_ms: int
    finished_unix_ms: int
    per_s: float
    total: int
    replayed: int
    skipped: int
    failed: int
    remaining: int
    bytes: int
    last_failure: str
    eta_unix_ms: int
    created_by: str
    def __init__(self, id: _Optional[str] = ..., state: _Optional[_Union[ReplayJobState, str]] = ..., selection: _Optional[str] = ..., created_unix_ms: _Optional[int] = ..., updated_unix_ms: _Optional[int] = ..., finished_unix_ms: _Optional[int] = ..., per_s: _Optional[float] = ..., total: _Optional[int] = ..., replayed: _Optional[int] = ..., skipped: _Optional[int] = ..., failed: _Optional[int] = ..., remaining: _Optional[int] = ..., bytes: _Optional[int] = ..., last_failure: _Optional[str] = ..., eta_unix_ms: _Optional[int] = ..., created_by: _Optional[str] = ...) -> None: ...

class CreateReplayJobResponse(_message.Message):
    __slots__ = ("estimate", "job")
    ESTIMATE_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    estimate: ReplayEstimate
    job: ReplayJob
    def __init__(self, estimate: _Optional[_Union[ReplayEstimate, _Mapping]] = ..., job: _Optional[_Union[ReplayJob, _Mapping]] = ...) -> None: ...

class GetReplayJobRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class GetReplayJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: ReplayJob
    def __init__(self, job: _Optional[_Union[ReplayJob, _Mapping]] = ...) -> None: ...

class ListReplayJobsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListReplayJobsResponse(_message.Message):
    __slots__ = ("jobs",)
    JOBS_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[ReplayJob]
    def __init__(self, jobs: _Optional[_Iterable[_Union[ReplayJob, _Mapping]]] = ...) -> None: ...

class UpdateReplayJobRequest(_message.Message):
    __slots__ = ("id", "action")
    ID_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    id: str
    action: ReplayJobAction
    def __init__(self, id: _Optional[str] = ..., action: _Optional[_Union[ReplayJobAction, str]] = ...) -> None: ...

class UpdateReplayJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: ReplayJob
    def __init__(self, job: _Optional[_Union[ReplayJob, _Mapping]] = ...) -> None: ...

class Attempt(_message.Message):
    __slots__ = ("number", "started_unix_ms", "ended_unix_ms", "outcome", "error", "http_status", "latency_us")
    NUMBER_FIELD_NUMBER: _ClassVar[int]
    STARTED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    ENDED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    HTTP_STATUS_FIELD_NUMBER: _ClassVar[int]
    LATENCY_US_FIELD_NUMBER: _ClassVar[int]
    number: int
    started_unix_ms: int
    ended_unix_ms: int
    outcome: str
    error: str
    http_status: int
    latency_us: int
    def __init__(self, number: _Optional[int] = ..., started_unix_ms: _Optional[int] = ..., ended_unix_ms: _Optional[int] = ..., outcome: _Optional[str] = ..., error: _Optional[str] = ..., http_status: _Optional[int] = ..., latency_us: _Optional[int] = ...) -> None: ...

class GetMessageResponse(_message.Message):
    __slots__ = ("id", "destination", "state", "attempts", "max_attempts", "enqueued_unix_ms", "next_attempt_unix_ms", "history", "last_error", "event_type", "idempotency_key", "payload_size", "completed_unix_ms", "payload", "headers", "payload_expired", "event_id", "ordering_key", "sequence", "out_of_order", "blocks_lane", "replays", "attempts_before_replay")
    class HeadersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    ENQUEUED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    NEXT_ATTEMPT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    EVENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_SIZE_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_EXPIRED_FIELD_NUMBER: _ClassVar[int]
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    ORDERING_KEY_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    OUT_OF_ORDER_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_LANE_FIELD_NUMBER: _ClassVar[int]
    REPLAYS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_BEFORE_REPLAY_FIELD_NUMBER: _ClassVar[int]
    id: str
    destination: Destination
    state: MessageState
    attempts: int
    max_attempts: int
    enqueued_unix_ms: int
    next_attempt_unix_ms: int
    history: _containers.RepeatedCompositeFieldContainer[Attempt]
    last_error: str
    event_type: str
    idempotency_key: str
    payload_size: int
    completed_unix_ms: int
    payload: bytes
    headers: _containers.ScalarMap[str, str]
    payload_expired: bool
    event_id: str
    ordering_key: str
    sequence: int
    out_of_order: bool
    blocks_lane: bool
    replays: int
    attempts_before_replay: int
    def __init__(self, id: _Optional[str] = ..., destination: _Optional[_Union[Destination, _Mapping]] = ..., state: _Optional[_Union[MessageState, str]] = ..., attempts: _Optional[int] = ..., max_attempts: _Optional[int] = ..., enqueued_unix_ms: _Optional[int] = ..., next_attempt_unix_ms: _Optional[int] = ..., history: _Optional[_Iterable[_Union[Attempt, _Mapping]]] = ..., last_error: _Optional[str] = ..., event_type: _Optional[str] = ..., idempotency_key: _Optional[str] = ..., payload_size: _Optional[int] = ..., completed_unix_ms: _Optional[int] = ..., payload: _Optional[bytes] = ..., headers: _Optional[_Mapping[str, str]] = ..., payload_expired: _Optional[bool] = ..., event_id: _Optional[str] = ..., ordering_key: _Optional[str] = ..., sequence: _Optional[int] = ..., out_of_order: _Optional[bool] = ..., blocks_lane: _Optional[bool] = ..., replays: _Optional[int] = ..., attempts_before_replay: _Optional[int] = ...) -> None: ...

class Endpoint(_message.Message):
    __slots__ = ("name", "url", "description", "max_attempts", "retry_base_ms", "retry_cap_ms", "disabled", "created_unix_ms", "updated_unix_ms", "secrets", "connect_timeout_ms", "timeout_ms", "max_in_flight", "rate_limit_per_s", "rate_limit_burst", "disabled_reason", "disabled_unix_ms", "paused", "paused_reason", "paused_unix_ms", "secret_summaries", "headers", "proxy_url", "client_certificate_pem", "client_key_pem", "client_certificate_summary", "oauth2", "fifo", "catch_up", "retention_secs")
    class HeadersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    RETRY_BASE_MS_FIELD_NUMBER: _ClassVar[int]
    RETRY_CAP_MS_FIELD_NUMBER: _ClassVar[int]
    DISABLED_FIELD_NUMBER: _ClassVar[int]
    CREATED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    UPDATED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    SECRETS_FIELD_NUMBER: _ClassVar[int]
    CONNECT_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    RATE_LIMIT_PER_S_FIELD_NUMBER: _ClassVar[int]
    RATE_LIMIT_BURST_FIELD_NUMBER: _ClassVar[int]
    DISABLED_REASON_FIELD_NUMBER: _ClassVar[int]
    DISABLED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    PAUSED_REASON_FIELD_NUMBER: _ClassVar[int]
    PAUSED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    SECRET_SUMMARIES_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    PROXY_URL_FIELD_NUMBER: _ClassVar[int]
    CLIENT_CERTIFICATE_PEM_FIELD_NUMBER: _ClassVar[int]
    CLIENT_KEY_PEM_FIELD_NUMBER: _ClassVar[int]
    CLIENT_CERTIFICATE_SUMMARY_FIELD_NUMBER: _ClassVar[int]
    OAUTH2_FIELD_NUMBER: _ClassVar[int]
    FIFO_FIELD_NUMBER: _ClassVar[int]
    CATCH_UP_FIELD_NUMBER: _ClassVar[int]
    RETENTION_SECS_FIELD_NUMBER: _ClassVar[int]
    name: str
    url: str
    description: str
    max_attempts: int
    retry_base_ms: int
    retry_cap_ms: int
    disabled: bool
    created_unix_ms: int
    updated_unix_ms: int
    secrets: _containers.RepeatedScalarFieldContainer[str]
    connect_timeout_ms: int
    timeout_ms: int
    max_in_flight: int
    rate_limit_per_s: float
    rate_limit_burst: int
    disabled_reason: str
    disabled_unix_ms: int
    paused: bool
    paused_reason: str
    paused_unix_ms: int
    secret_summaries: _containers.RepeatedCompositeFieldContainer[SecretSummary]
    headers: _containers.ScalarMap[str, str]
    proxy_url: str
    client_certificate_pem: str
    client_key_pem: str
    client_certificate_summary: str
    oauth2: OAuth2
    fifo: Fifo
    catch_up: bool
    retention_secs: int
    def __init__(self, name: _Optional[str] = ..., url: _Optional[str] = ..., description: _Optional[str] = ..., max_attempts: _Optional[int] = ..., retry_base_ms: _Optional[int] = ..., retry_cap_ms: _Optional[int] = ..., disabled: _Optional[bool] = ..., created_unix_ms: _Optional[int] = ..., updated_unix_ms: _Optional[int] = ..., secrets: _Optional[_Iterable[str]] = ..., connect_timeout_ms: _Optional[int] = ..., timeout_ms: _Optional[int] = ..., max_in_flight: _Optional[int] = ..., rate_limit_per_s: _Optional[float] = ..., rate_limit_burst: _Optional[int] = ..., disabled_reason: _Optional[str] = ..., disabled_unix_ms: _Optional[int] = ..., paused: _Optional[bool] = ..., paused_reason: _Optional[str] = ..., paused_unix_ms: _Optional[int] = ..., secret_summaries: _Optional[_Iterable[_Union[SecretSummary, _Mapping]]] = ..., headers: _Optional[_Mapping[str, str]] = ..., proxy_url: _Optional[str] = ..., client_certificate_pem: _Optional[str] = ..., client_key_pem: _Optional[str] = ..., client_certificate_summary: _Optional[str] = ..., oauth2: _Optional[_Union[OAuth2, _Mapping]] = ..., fifo: _Optional[_Union[Fifo, str]] = ..., catch_up: _Optional[bool] = ..., retention_secs: _Optional[int] = ...) -> None: ...

class OAuth2(_message.Message):
    __slots__ = ("token_url", "client_id", "client_secret", "scopes", "audience")
    TOKEN_URL_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_SECRET_FIELD_NUMBER: _ClassVar[int]
    SCOPES_FIELD_NUMBER: _ClassVar[int]
    AUDIENCE_FIELD_NUMBER: _ClassVar[int]
    token_url: str
    client_id: str
    client_secret: str
    scopes: _containers.RepeatedScalarFieldContainer[str]
    audience: str
    def __init__(self, token_url: _Optional[str] = ..., client_id: _Optional[str] = ..., client_secret: _Optional[str] = ..., scopes: _Optional[_Iterable[str]] = ..., audience: _Optional[str] = ...) -> None: ...

class SecretSummary(_message.Message):
    __slots__ = ("prefix", "fingerprint", "public_key")
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    PUBLIC_KEY_FIELD_NUMBER: _ClassVar[int]
    prefix: str
    fingerprint: str
    public_key: str
    def __init__(self, prefix: _Optional[str] = ..., fingerprint: _Optional[str] = ..., public_key: _Optional[str] = ...) -> None: ...

class PutEndpointRequest(_message.Message):
    __slots__ = ("endpoint",)
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    endpoint: Endpoint
    def __init__(self, endpoint: _Optional[_Union[Endpoint, _Mapping]] = ...) -> None: ...

class PutEndpointResponse(_message.Message):
    __slots__ = ("endpoint", "created", "warnings")
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    endpoint: Endpoint
    created: bool
    warnings: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, endpoint: _Optional[_Union[Endpoint, _Mapping]] = ..., created: _Optional[bool] = ..., warnings: _Optional[_Iterable[str]] = ...) -> None: ...

class GetEndpointRequest(_message.Message):
    __slots__ = ("name", "reveal_secrets")
    NAME_FIELD_NUMBER: _ClassVar[int]
    REVEAL_SECRETS_FIELD_NUMBER: _ClassVar[int]
    name: str
    reveal_secrets: bool
    def __init__(self, name: _Optional[str] = ..., reveal_secrets: _Optional[bool] = ...) -> None: ...

class GetEndpointResponse(_message.Message):
    __slots__ = ("endpoint",)
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    endpoint: Endpoint
    def __init__(self, endpoint: _Optional[_Union[Endpoint, _Mapping]] = ...) -> None: ...

class ListEndpointsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListEndpointsResponse(_message.Message):
    __slots__ = ("endpoints",)
    ENDPOINTS_FIELD_NUMBER: _ClassVar[int]
    endpoints: _containers.RepeatedCompositeFieldContainer[Endpoint]
    def __init__(self, endpoints: _Optional[_Iterable[_Union[Endpoint, _Mapping]]] = ...) -> None: ...

class Queue(_message.Message):
    __slots__ = ("name", "fifo", "description", "from_config", "created_unix_ms", "updated_unix_ms", "retention_secs")
    NAME_FIELD_NUMBER: _ClassVar[int]
    FIFO_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    FROM_CONFIG_FIELD_NUMBER: _ClassVar[int]
    CREATED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    UPDATED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    RETENTION_SECS_FIELD_NUMBER: _ClassVar[int]
    name: str
    fifo: str
    description: str
    from_config: bool
    created_unix_ms: int
    updated_unix_ms: int
    retention_secs: int
    def __init__(self, name: _Optional[str] = ..., fifo: _Optional[str] = ..., description: _Optional[str] = ..., from_config: _Optional[bool] = ..., created_unix_ms: _Optional[int] = ..., updated_unix_ms: _Optional[int] = ..., retention_secs: _Optional[int] = ...) -> None: ...

class PutQueueRequest(_message.Message):
    __slots__ = ("queue",)
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    queue: Queue
    def __init__(self, queue: _Optional[_Union[Queue, _Mapping]] = ...) -> None: ...

class PutQueueResponse(_message.Message):
    __slots__ = ("queue", "created")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    queue: Queue
    created: bool
    def __init__(self, queue: _Optional[_Union[Queue, _Mapping]] = ..., created: _Optional[bool] = ...) -> None: ...

class GetQueueRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class GetQueueResponse(_message.Message):
    __slots__ = ("queue",)
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    queue: Queue
    def __init__(self, queue: _Optional[_Union[Queue, _Mapping]] = ...) -> None: ...

class ListQueuesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListQueuesResponse(_message.Message):
    __slots__ = ("queues",)
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    queues: _containers.RepeatedCompositeFieldContainer[Queue]
    def __init__(self, queues: _Optional[_Iterable[_Union[Queue, _Mapping]]] = ...) -> None: ...

class DeleteQueueRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DeleteQueueResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DeleteEndpointRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DeleteEndpointResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListDeadLettersRequest(_message.Message):
    __slots__ = ("destination", "page_size", "page_token")
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    destination: Destination
    page_size: int
    page_token: str
    def __init__(self, destination: _Optional[_Union[Destination, _Mapping]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class DeadLetter(_message.Message):
    __slots__ = ("id", "destination", "attempts", "last_error", "enqueued_unix_ms", "dead_lettered_unix_ms", "event_type", "payload_size", "ordering_key", "sequence", "blocks_lane")
    ID_FIELD_NUMBER: _ClassVar[int]
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    ENQUEUED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTERED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    EVENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_SIZE_FIELD_NUMBER: _ClassVar[int]
    ORDERING_KEY_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_LANE_FIELD_NUMBER: _ClassVar[int]
    id: str
    destination: Destination
    attempts: int
    last_error: str
    enqueued_unix_ms: int
    dead_lettered_unix_ms: int
    event_type: str
    payload_size: int
    ordering_key: str
    sequence: int
    blocks_lane: bool
    def __init__(self, id: _Optional[str] = ..., destination: _Optional[_Union[Destination, _Mapping]] = ..., attempts: _Optional[int] = ..., last_error: _Optional[str] = ..., enqueued_unix_ms: _Optional[int] = ..., dead_lettered_unix_ms: _Optional[int] = ..., event_type: _Optional[str] = ..., payload_size: _Optional[int] = ..., ordering_key: _Optional[str] = ..., sequence: _Optional[int] = ..., blocks_lane: _Optional[bool] = ...) -> None: ...

class ListDeadLettersResponse(_message.Message):
    __slots__ = ("dead_letters", "next_page_token")
    DEAD_LETTERS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    dead_letters: _containers.RepeatedCompositeFieldContainer[DeadLetter]
    next_page_token: str
    def __init__(self, dead_letters: _Optional[_Iterable[_Union[DeadLetter, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ReplayDeadLettersRequest(_message.Message):
    __slots__ = ("ids", "destination", "limit", "filter", "dry_run", "max_per_s", "as_job")
    IDS_FIELD_NUMBER: _ClassVar[int]
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    MAX_PER_S_FIELD_NUMBER: _ClassVar[int]
    AS_JOB_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[str]
    destination: Destination
    limit: int
    filter: DeadLetterFilter
    dry_run: bool
    max_per_s: float
    as_job: bool
    def __init__(self, ids: _Optional[_Iterable[str]] = ..., destination: _Optional[_Union[Destination, _Mapping]] = ..., limit: _Optional[int] = ..., filter: _Optional[_Union[DeadLetterFilter, _Mapping]] = ..., dry_run: _Optional[bool] = ..., max_per_s: _Optional[float] = ..., as_job: _Optional[bool] = ...) -> None: ...

class ReplayDeadLettersResponse(_message.Message):
    __slots__ = ("replayed", "matched", "last_due_unix_ms", "job_id")
    REPLAYED_FIELD_NUMBER: _ClassVar[int]
    MATCHED_FIELD_NUMBER: _ClassVar[int]
    LAST_DUE_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    replayed: int
    matched: int
    last_due_unix_ms: int
    job_id: str
    def __init__(self, replayed: _Optional[int] = ..., matched: _Optional[int] = ..., last_due_unix_ms: _Optional[int] = ..., job_id: _Optional[str] = ...) -> None: ...

class DeadLetterFilter(_message.Message):
    __slots__ = ("destination", "dead_after_unix_ms", "dead_before_unix_ms", "http_status", "error_contains")
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    DEAD_AFTER_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    DEAD_BEFORE_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    HTTP_STATUS_FIELD_NUMBER: _ClassVar[int]
    ERROR_CONTAINS_FIELD_NUMBER: _ClassVar[int]
    destination: Destination
    dead_after_unix_ms: int
    dead_before_unix_ms: int
    http_status: int
    error_contains: str
    def __init__(self, destination: _Optional[_Union[Destination, _Mapping]] = ..., dead_after_unix_ms: _Optional[int] = ..., dead_before_unix_ms: _Optional[int] = ..., http_status: _Optional[int] = ..., error_contains: _Optional[str] = ...) -> None: ...

class PurgeDeadLettersRequest(_message.Message):
    __slots__ = ("filter", "all", "dry_run", "limit", "ids")
    FILTER_FIELD_NUMBER: _ClassVar[int]
    ALL_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    IDS_FIELD_NUMBER: _ClassVar[int]
    filter: DeadLetterFilter
    all: bool
    dry_run: bool
    limit: int
    ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, filter: _Optional[_Union[DeadLetterFilter, _Mapping]] = ..., all: _Optional[bool] = ..., dry_run: _Optional[bool] = ..., limit: _Optional[int] = ..., ids: _Optional[_Iterable[str]] = ...) -> None: ...

class PurgeDeadLettersResponse(_message.Message):
    __slots__ = ("purged", "matched")
    PURGED_FIELD_NUMBER: _ClassVar[int]
    MATCHED_FIELD_NUMBER: _ClassVar[int]
    purged: int
    matched: int
    def __init__(self, purged: _Optional[int] = ..., matched: _Optional[int] = ...) -> None: ...

class AnalyzeDeadLettersRequest(_message.Message):
    __slots__ = ("destination", "window_secs")
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    WINDOW_SECS_FIELD_NUMBER: _ClassVar[int]
    destination: Destination
    window_secs: int
    def __init__(self, destination: _Optional[_Union[Destination, _Mapping]] = ..., window_secs: _Optional[int] = ...) -> None: ...

class DeadLetterPattern(_message.Message):
    __slots__ = ("kind", "description", "suggestion")
    KIND_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    SUGGESTION_FIELD_NUMBER: _ClassVar[int]
    kind: str
    description: str
    suggestion: str
    def __init__(self, kind: _Optional[str] = ..., description: _Optional[str] = ..., suggestion: _Optional[str] = ...) -> None: ...

class DeadLetterAnalysis(_message.Message):
    __slots__ = ("destination", "count", "most_common_error", "most_common_error_count", "most_common_status", "most_common_status_count", "first_unix_ms", "last_unix_ms", "average_attempts", "busiest_hour_count", "patterns")
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    MOST_COMMON_ERROR_FIELD_NUMBER: _ClassVar[int]
    MOST_COMMON_ERROR_COUNT_FIELD_NUMBER: _ClassVar[int]
    MOST_COMMON_STATUS_FIELD_NUMBER: _ClassVar[int]
    MOST_COMMON_STATUS_COUNT_FIELD_NUMBER: _ClassVar[int]
    FIRST_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    LAST_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    AVERAGE_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    BUSIEST_HOUR_COUNT_FIELD_NUMBER: _ClassVar[int]
    PATTERNS_FIELD_NUMBER: _ClassVar[int]
    destination: str
    count: int
    most_common_error: str
    most_common_error_count: int
    most_common_status: int
    most_common_status_count: int
    first_unix_ms: int
    last_unix_ms: int
    average_attempts: float
    busiest_hour_count: int
    patterns: _containers.RepeatedCompositeFieldContainer[DeadLetterPattern]
    def __init__(self, destination: _Optional[str] = ..., count: _Optional[int] = ..., most_common_error: _Optional[str] = ..., most_common_error_count: _Optional[int] = ..., most_common_status: _Optional[int] = ..., most_common_status_count: _Optional[int] = ..., first_unix_ms: _Optional[int] = ..., last_unix_ms: _Optional[int] = ..., average_attempts: _Optional[float] = ..., busiest_hour_count: _Optional[int] = ..., patterns: _Optional[_Iterable[_Union[DeadLetterPattern, _Mapping]]] = ...) -> None: ...

class AnalyzeDeadLettersResponse(_message.Message):
    __slots__ = ("window_start_unix_ms", "window_end_unix_ms", "destinations", "scanned", "truncated")
    WINDOW_START_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    WINDOW_END_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    DESTINATIONS_FIELD_NUMBER: _ClassVar[int]
    SCANNED_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    window_start_unix_ms: int
    window_end_unix_ms: int
    destinations: _containers.RepeatedCompositeFieldContainer[DeadLetterAnalysis]
    scanned: int
    truncated: bool
    def __init__(self, window_start_unix_ms: _Optional[int] = ..., window_end_unix_ms: _Optional[int] = ..., destinations: _Optional[_Iterable[_Union[DeadLetterAnalysis, _Mapping]]] = ..., scanned: _Optional[int] = ..., truncated: _Optional[bool] = ...) -> None: ...

class PauseEndpointRequest(_message.Message):
    __slots__ = ("name", "reason")
    NAME_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    name: str
    reason: str
    def __init__(self, name: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class PauseEndpointResponse(_message.Message):
    __slots__ = ("endpoint",)
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    endpoint: Endpoint
    def __init__(self, endpoint: _Optional[_Union[Endpoint, _Mapping]] = ...) -> None: ...

class ResumeEndpointRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ResumeEndpointResponse(_message.Message):
    __slots__ = ("endpoint",)
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    endpoint: Endpoint
    def __init__(self, endpoint: _Optional[_Union[Endpoint, _Mapping]] = ...) -> None: ...

class WatchRequest(_message.Message):
    __slots__ = ("destination",)
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    destination: Destination
    def __init__(self, destination: _Optional[_Union[Destination, _Mapping]] = ...) -> None: ...

class WatchEvent(_message.Message):
    __slots__ = ("unix_ms", "kind", "destination", "message_id", "attempt", "http_status", "latency_us", "detail")
    UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    HTTP_STATUS_FIELD_NUMBER: _ClassVar[int]
    LATENCY_US_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    unix_ms: int
    kind: str
    destination: str
    message_id: str
    attempt: int
    http_status: int
    latency_us: int
    detail: str
    def __init__(self, unix_ms: _Optional[int] = ..., kind: _Optional[str] = ..., destination: _Optional[str] = ..., message_id: _Optional[str] = ..., attempt: _Optional[int] = ..., http_status: _Optional[int] = ..., latency_us: _Optional[int] = ..., detail: _Optional[str] = ...) -> None: ...

class Source(_message.Message):
    __slots__ = ("name", "scheme", "hmac", "secrets", "tolerance_secs", "max_body_bytes", "content_types", "json_schema", "event_type", "dedup_id", "queue", "endpoint", "topic", "bearer_sha256", "basic", "redact", "secret_summaries", "from_config", "path", "search_keys")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SCHEME_FIELD_NUMBER: _ClassVar[int]
    HMAC_FIELD_NUMBER: _ClassVar[int]
    SECRETS_FIELD_NUMBER: _ClassVar[int]
    TOLERANCE_SECS_FIELD_NUMBER: _ClassVar[int]
    MAX_BODY_BYTES_FIELD_NUMBER: _ClassVar[int]
    CONTENT_TYPES_FIELD_NUMBER: _ClassVar[int]
    JSON_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    EVENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    DEDUP_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    BEARER_SHA256_FIELD_NUMBER: _ClassVar[int]
    BASIC_FIELD_NUMBER: _ClassVar[int]
    REDACT_FIELD_NUMBER: _ClassVar[int]
    SECRET_SUMMARIES_FIELD_NUMBER: _ClassVar[int]
    FROM_CONFIG_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    SEARCH_KEYS_FIELD_NUMBER: _ClassVar[int]
    name: str
    scheme: str
    hmac: HmacSettings
    secrets: _containers.RepeatedScalarFieldContainer[str]
    tolerance_secs: int
    max_body_bytes: int
    content_types: _containers.RepeatedScalarFieldContainer[str]
    json_schema: str
    event_type: str
    dedup_id: str
    queue: str
    endpoint: str
    topic: str
    bearer_sha256: _containers.RepeatedScalarFieldContainer[str]
    basic: _containers.RepeatedScalarFieldContainer[str]
    redact: Redaction
    secret_summaries: _containers.RepeatedCompositeFieldContainer[SecretSummary]
    from_config: bool
    path: str
    search_keys: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., scheme: _Optional[str] = ..., hmac: _Optional[_Union[HmacSettings, _Mapping]] = ..., secrets: _Optional[_Iterable[str]] = ..., tolerance_secs: _Optional[int] = ..., max_body_bytes: _Optional[int] = ..., content_types: _Optional[_Iterable[str]] = ..., json_schema: _Optional[str] = ..., event_type: _Optional[str] = ..., dedup_id: _Optional[str] = ..., queue: _Optional[str] = ..., endpoint: _Optional[str] = ..., topic: _Optional[str] = ..., bearer_sha256: _Optional[_Iterable[str]] = ..., basic: _Optional[_Iterable[str]] = ..., redact: _Optional[_Union[Redaction, _Mapping]] = ..., secret_summaries: _Optional[_Iterable[_Union[SecretSummary, _Mapping]]] = ..., from_config: _Optional[bool] = ..., path: _Optional[str] = ..., search_keys: _Optional[_Iterable[str]] = ...) -> None: ...

class HmacSettings(_message.Message):
    __slots__ = ("header", "algorithm", "encoding", "prefix", "timestamp_header", "separator")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    ALGORITHM_FIELD_NUMBER: _ClassVar[int]
    ENCODING_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_HEADER_FIELD_NUMBER: _ClassVar[int]
    SEPARATOR_FIELD_NUMBER: _ClassVar[int]
    header: str
    algorithm: str
    encoding: str
    prefix: str
    timestamp_header: str
    separator: str
    def __init__(self, header: _Optional[str] = ..., algorithm: _Optional[str] = ..., encoding: _Optional[str] = ..., prefix: _Optional[str] = ..., timestamp_header: _Optional[str] = ..., separator: _Optional[str] = ...) -> None: ...

class Redaction(_message.Message):
    __slots__ = ("remove", "mask", "detectors")
    REMOVE_FIELD_NUMBER: _ClassVar[int]
    MASK_FIELD_NUMBER: _ClassVar[int]
    DETECTORS_FIELD_NUMBER: _ClassVar[int]
    remove: _containers.RepeatedScalarFieldContainer[str]
    mask: _containers.RepeatedScalarFieldContainer[str]
    detectors: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, remove: _Optional[_Iterable[str]] = ..., mask: _Optional[_Iterable[str]] = ..., detectors: _Optional[_Iterable[str]] = ...) -> None: ...

class PutSourceRequest(_message.Message):
    __slots__ = ("source",)
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    source: Source
    def __init__(self, source: _Optional[_Union[Source, _Mapping]] = ...) -> None: ...

class PutSourceResponse(_message.Message):
    __slots__ = ("source", "created")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    source: Source
    created: bool
    def __init__(self, source: _Optional[_Union[Source, _Mapping]] = ..., created: _Optional[bool] = ...) -> None: ...

class GetSourceRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class GetSourceResponse(_message.Message):
    __slots__ = ("source",)
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    source: Source
    def __init__(self, source: _Optional[_Union[Source, _Mapping]] = ...) -> None: ...

class ListSourcesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListSourcesResponse(_message.Message):
    __slots__ = ("sources",)
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    sources: _containers.RepeatedCompositeFieldContainer[Source]
    def __init__(self, sources: _Optional[_Iterable[_Union[Source, _Mapping]]] = ...) -> None: ...

class DeleteSourceRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DeleteSourceResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class EventType(_message.Message):
    __slots__ = ("name", "description", "json_schema", "from_config", "created_unix_ms", "updated_unix_ms", "search_keys")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    JSON_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    FROM_CONFIG_FIELD_NUMBER: _ClassVar[int]
    CREATED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    UPDATED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    SEARCH_KEYS_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    json_schema: str
    from_config: bool
    created_unix_ms: int
    updated_unix_ms: int
    search_keys: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., json_schema: _Optional[str] = ..., from_config: _Optional[bool] = ..., created_unix_ms: _Optional[int] = ..., updated_unix_ms: _Optional[int] = ..., search_keys: _Optional[_Iterable[str]] = ...) -> None: ...

class PutEventTypeRequest(_message.Message):
    __slots__ = ("event_type",)
    EVENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    event_type: EventType
    def __init__(self, event_type: _Optional[_Union[EventType, _Mapping]] = ...) -> None: ...

class PutEventTypeResponse(_message.Message):
    __slots__ = ("event_type", "created")
    EVENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    event_type: EventType
    created: bool
    def __init__(self, event_type: _Optional[_Union[EventType, _Mapping]] = ..., created: _Optional[bool] = ...) -> None: ...

class GetEventTypeRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class GetEventTypeResponse(_message.Message):
    __slots__ = ("event_type",)
    EVENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    event_type: EventType
    def __init__(self, event_type: _Optional[_Union[EventType, _Mapping]] = ...) -> None: ...

class ListEventTypesRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListEventTypesResponse(_message.Message):
    __slots__ = ("event_types", "strict", "next_page_token")
    EVENT_TYPES_FIELD_NUMBER: _ClassVar[int]
    STRICT_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    event_types: _containers.RepeatedCompositeFieldContainer[EventType]
    strict: bool
    next_page_token: str
    def __init__(self, event_types: _Optional[_Iterable[_Union[EventType, _Mapping]]] = ..., strict: _Optional[bool] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class DeleteEventTypeRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DeleteEventTypeResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Subscription(_message.Message):
    __slots__ = ("name", "endpoint", "queue", "event_types", "filter", "description", "created_unix_ms", "updated_unix_ms")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    EVENT_TYPES_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    CREATED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    UPDATED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    name: str
    endpoint: str
    queue: str
    event_types: _containers.RepeatedScalarFieldContainer[str]
    filter: _struct_pb2.Struct
    description: str
    created_unix_ms: int
    updated_unix_ms: int
    def __init__(self, name: _Optional[str] = ..., endpoint: _Optional[str] = ..., queue: _Optional[str] = ..., event_types: _Optional[_Iterable[str]] = ..., filter: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., description: _Optional[str] = ..., created_unix_ms: _Optional[int] = ..., updated_unix_ms: _Optional[int] = ...) -> None: ...

class PutSubscriptionRequest(_message.Message):
    __slots__ = ("subscription",)
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    subscription: Subscription
    def __init__(self, subscription: _Optional[_Union[Subscription, _Mapping]] = ...) -> None: ...

class PutSubscriptionResponse(_message.Message):
    __slots__ = ("subscription", "created")
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    subscription: Subscription
    created: bool
    def __init__(self, subscription: _Optional[_Union[Subscription, _Mapping]] = ..., created: _Optional[bool] = ...) -> None: ...

class GetSubscriptionRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class GetSubscriptionResponse(_message.Message):
    __slots__ = ("subscription",)
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    subscription: Subscription
    def __init__(self, subscription: _Optional[_Union[Subscription, _Mapping]] = ...) -> None: ...

class ListSubscriptionsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListSubscriptionsResponse(_message.Message):
    __slots__ = ("subscriptions",)
    SUBSCRIPTIONS_FIELD_NUMBER: _ClassVar[int]
    subscriptions: _containers.RepeatedCompositeFieldContainer[Subscription]
    def __init__(self, subscriptions: _Optional[_Iterable[_Union[Subscription, _Mapping]]] = ...) -> None: ...

class DeleteSubscriptionRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DeleteSubscriptionResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Tenant(_message.Message):
    __slots__ = ("name", "display_name", "metadata", "created_unix_ms", "updated_unix_ms", "quota", "weight", "portal", "retention_secs")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    DISPLAY_NAME_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    CREATED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    UPDATED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    QUOTA_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    PORTAL_FIELD_NUMBER: _ClassVar[int]
    RETENTION_SECS_FIELD_NUMBER: _ClassVar[int]
    name: str
    display_name: str
    metadata: _containers.ScalarMap[str, str]
    created_unix_ms: int
    updated_unix_ms: int
    quota: TenantQuota
    weight: int
    portal: TenantPortal
    retention_secs: int
    def __init__(self, name: _Optional[str] = ..., display_name: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ..., created_unix_ms: _Optional[int] = ..., updated_unix_ms: _Optional[int] = ..., quota: _Optional[_Union[TenantQuota, _Mapping]] = ..., weight: _Optional[int] = ..., portal: _Optional[_Union[TenantPortal, _Mapping]] = ..., retention_secs: _Optional[int] = ...) -> None: ...

class TenantPortal(_message.Message):
    __slots__ = ("frame_ancestors", "title", "logo_url", "accent_color")
    FRAME_ANCESTORS_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    LOGO_URL_FIELD_NUMBER: _ClassVar[int]
    ACCENT_COLOR_FIELD_NUMBER: _ClassVar[int]
    frame_ancestors: _containers.RepeatedScalarFieldContainer[str]
    title: str
    logo_url: str
    accent_color: str
    def __init__(self, frame_ancestors: _Optional[_Iterable[str]] = ..., title: _Optional[str] = ..., logo_url: _Optional[str] = ..., accent_color: _Optional[str] = ...) -> None: ...

class TenantQuota(_message.Message):
    __slots__ = ("max_live_messages", "max_live_bytes", "max_events_per_day", "max_events_per_second", "max_endpoints", "max_subscriptions", "max_sources")
    MAX_LIVE_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    MAX_LIVE_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_EVENTS_PER_DAY_FIELD_NUMBER: _ClassVar[int]
    MAX_EVENTS_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    MAX_ENDPOINTS_FIELD_NUMBER: _ClassVar[int]
    MAX_SUBSCRIPTIONS_FIELD_NUMBER: _ClassVar[int]
    MAX_SOURCES_FIELD_NUMBER: _ClassVar[int]
    max_live_messages: int
    max_live_bytes: int
    max_events_per_day: int
    max_events_per_second: int
    max_endpoints: int
    max_subscriptions: int
    max_sources: int
    def __init__(self, max_live_messages: _Optional[int] = ..., max_live_bytes: _Optional[int] = ..., max_events_per_day: _Optional[int] = ..., max_events_per_second: _Optional[int] = ..., max_endpoints: _Optional[int] = ..., max_subscriptions: _Optional[int] = ..., max_sources: _Optional[int] = ...) -> None: ...

class CreateTenantRequest(_message.Message):
    __slots__ = ("tenant",)
    TENANT_FIELD_NUMBER: _ClassVar[int]
    tenant: Tenant
    def __init__(self, tenant: _Optional[_Union[Tenant, _Mapping]] = ...) -> None: ...

class CreateTenantResponse(_message.Message):
    __slots__ = ("tenant",)
    TENANT_FIELD_NUMBER: _ClassVar[int]
    tenant: Tenant
    def __init__(self, tenant: _Optional[_Union[Tenant, _Mapping]] = ...) -> None: ...

class GetTenantRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class GetTenantResponse(_message.Message):
    __slots__ = ("tenant",)
    TENANT_FIELD_NUMBER: _ClassVar[int]
    tenant: Tenant
    def __init__(self, tenant: _Optional[_Union[Tenant, _Mapping]] = ...) -> None: ...

class ListTenantsRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListTenantsResponse(_message.Message):
    __slots__ = ("tenants", "next_page_token")
    TENANTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    tenants: _containers.RepeatedCompositeFieldContainer[Tenant]
    next_page_token: str
    def __init__(self, tenants: _Optional[_Iterable[_Union[Tenant, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class UpdateTenantRequest(_message.Message):
    __slots__ = ("tenant",)
    TENANT_FIELD_NUMBER: _ClassVar[int]
    tenant: Tenant
    def __init__(self, tenant: _Optional[_Union[Tenant, _Mapping]] = ...) -> None: ...

class UpdateTenantResponse(_message.Message):
    __slots__ = ("tenant",)
    TENANT_FIELD_NUMBER: _ClassVar[int]
    tenant: Tenant
    def __init__(self, tenant: _Optional[_Union[Tenant, _Mapping]] = ...) -> None: ...

class DeleteTenantRequest(_message.Message):
    __slots__ = ("name", "force")
    NAME_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    name: str
    force: bool
    def __init__(self, name: _Optional[str] = ..., force: _Optional[bool] = ...) -> None: ...

class DeleteTenantResponse(_message.Message):
    __slots__ = ("removed_messages", "removed_objects")
    REMOVED_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    REMOVED_OBJECTS_FIELD_NUMBER: _ClassVar[int]
    removed_messages: int
    removed_objects: int
    def __init__(self, removed_messages: _Optional[int] = ..., removed_objects: _Optional[int] = ...) -> None: ...

class Token(_message.Message):
    __slots__ = ("name", "scopes", "destinations", "created_unix_ms", "created_by")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SCOPES_FIELD_NUMBER: _ClassVar[int]
    DESTINATIONS_FIELD_NUMBER: _ClassVar[int]
    CREATED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    CREATED_BY_FIELD_NUMBER: _ClassVar[int]
    name: str
    scopes: _containers.RepeatedScalarFieldContainer[str]
    destinations: _containers.RepeatedScalarFieldContainer[str]
    created_unix_ms: int
    created_by: str
    def __init__(self, name: _Optional[str] = ..., scopes: _Optional[_Iterable[str]] = ..., destinations: _Optional[_Iterable[str]] = ..., created_unix_ms: _Optional[int] = ..., created_by: _Optional[str] = ...) -> None: ...

class CreateTokenRequest(_message.Message):
    __slots__ = ("token",)
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    token: Token
    def __init__(self, token: _Optional[_Union[Token, _Mapping]] = ...) -> None: ...

class CreateTokenResponse(_message.Message):
    __slots__ = ("token", "secret")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    SECRET_FIELD_NUMBER: _ClassVar[int]
    token: Token
    secret: str
    def __init__(self, token: _Optional[_Union[Token, _Mapping]] = ..., secret: _Optional[str] = ...) -> None: ...

class ListTokensRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListTokensResponse(_message.Message):
    __slots__ = ("tokens",)
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    tokens: _containers.RepeatedCompositeFieldContainer[Token]
    def __init__(self, tokens: _Optional[_Iterable[_Union[Token, _Mapping]]] = ...) -> None: ...

class RevokeTokenRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class RevokeTokenResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CreatePortalLinkRequest(_message.Message):
    __slots__ = ("tenant", "scopes", "expires_in_secs", "destinations", "refresh_url", "subject")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    SCOPES_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_IN_SECS_FIELD_NUMBER: _ClassVar[int]
    DESTINATIONS_FIELD_NUMBER: _ClassVar[int]
    REFRESH_URL_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    scopes: _containers.RepeatedScalarFieldContainer[str]
    expires_in_secs: int
    destinations: _containers.RepeatedScalarFieldContainer[str]
    refresh_url: str
    subject: str
    def __init__(self, tenant: _Optional[str] = ..., scopes: _Optional[_Iterable[str]] = ..., expires_in_secs: _Optional[int] = ..., destinations: _Optional[_Iterable[str]] = ..., refresh_url: _Optional[str] = ..., subject: _Optional[str] = ...) -> None: ...

class CreatePortalLinkResponse(_message.Message):
    __slots__ = ("url", "link_id", "expires_unix_ms")
    URL_FIELD_NUMBER: _ClassVar[int]
    LINK_ID_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    url: str
    link_id: str
    expires_unix_ms: int
    def __init__(self, url: _Optional[str] = ..., link_id: _Optional[str] = ..., expires_unix_ms: _Optional[int] = ...) -> None: ...

class RevokePortalLinksRequest(_message.Message):
    __slots__ = ("tenant", "link_id")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    LINK_ID_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    link_id: str
    def __init__(self, tenant: _Optional[str] = ..., link_id: _Optional[str] = ...) -> None: ...

class RevokePortalLinksResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
