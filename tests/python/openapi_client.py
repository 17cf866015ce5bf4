"""hookd's HTTP/JSON API through a client no one here wrote: openapi-python-client (PyPI)
generates a package from the OpenAPI document hookd serves, and this script calls every
route but the event stream (tested from Rust) with it, against a real hookd.

Usage: openapi_client.py HTTP_ADDR (host:port of hookd's HTTP listener).
"""

import base64
import importlib
import time
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import urllib.request

from openapi_spec_validator import validate

addr = sys.argv[1]
base_url = f"http://{addr}"

# The document as served, checked by an OpenAPI 3.1 validator first.
with urllib.request.urlopen(f"{base_url}/v1/openapi.json", timeout=10) as r:
    document = json.load(r)
assert document["openapi"] == "3.1.0", document["openapi"]
validate(document)

work = pathlib.Path(tempfile.mkdtemp(prefix="hookd-openapi-"))
(work / "openapi.json").write_text(json.dumps(document))
env = dict(os.environ)
# The generator formats its output with ruff, installed beside it.
env["PATH"] = f"{pathlib.Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
generated = subprocess.run(
    [
        sys.executable,
        "-m",
        "openapi_python_client",
        "generate",
        "--path",
        str(work / "openapi.json"),
        "--meta",
        "none",
    ],
    cwd=work,
    env=env,
    capture_output=True,
    text=True,
)
print(generated.stdout, generated.stderr)
assert generated.returncode == 0, "openapi-python-client failed"
assert "Warning" not in generated.stdout + generated.stderr, "the generator warned"
sys.path.insert(0, str(work))
# Generated with the generator's defaults, the package is named from the document's title,
# and must not take the import name of hookd's own Python client (hookd_client).
packages = sorted(p.name for p in work.iterdir() if p.is_dir())
assert packages == ["hookd_http_api_client"], packages
PACKAGE = packages[0]

client_mod = importlib.import_module(f"{PACKAGE}.client")
m = importlib.import_module(f"{PACKAGE}.models")


def api(group, op):
    return importlib.import_module(f"{PACKAGE}.api.{group}.{op}")


client = client_mod.Client(base_url=base_url, raise_on_unexpected_status=True)


def ok(response, kind):
    """The parsed 200 answer, or the error body shown."""
    assert response.status_code == 200, (response.status_code, response.content)
    assert isinstance(response.parsed, kind), response.parsed
    return response.parsed


def b64(text):
    return base64.b64encode(text.encode()).decode()


# --- messages and queues -----------------------------------------------------------------
enq = ok(
    api("messages", "enqueue").sync_detailed(
        client=client,
        body=m.EnqueueRequest(queue="py-jobs", payload=b64("hello"), idempotency_key="k-1"),
    ),
    m.EnqueueResponse,
)
assert enq.duplicate is False
again = ok(
    api("messages", "enqueue").sync_detailed(
        client=client,
        body=m.EnqueueRequest(queue="py-jobs", payload=b64("hello"), idempotency_key="k-1"),
    ),
    m.EnqueueResponse,
)
assert again.duplicate is True and again.id == enq.id

batch = ok(
    api("messages", "enqueue_batch").sync_detailed(
        client=client,
        body=m.EnqueueBatchRequest(
            events=[
                m.EnqueueRequest(queue="py-jobs", payload=b64("two")),
                m.EnqueueRequest(queue="", payload=b64("bad")),
            ]
        ),
    ),
    m.EnqueueBatchResponse,
)
assert batch.results[0].ok.id, batch.results[0]
# A bad event fails alone, with the gRPC code and a message naming the field.
assert batch.results[1].error.code == 3, batch.results[1]
assert "queue" in batch.results[1].error.message, batch.results[1]

got = ok(api("messages", "get_message").sync_detailed(enq.id, client=client), m.GetMessageResponse)
assert got.id == enq.id and base64.b64decode(got.payload) == b"hello", got
assert got.state == m.MessageState.MESSAGE_STATE_PENDING, got.state

received = ok(
    api("queues", "receive").sync_detailed(
        "py-jobs", client=client, body=m.ReceiveRequest(max_messages=10, wait_ms="1000")
    ),
    m.ReceiveResponse,
)
assert len(received.messages) == 2, received
first, second = received.messages
assert first.id == enq.id and base64.b64decode(first.payload) == b"hello"

# A JSON payload goes as `data`, no base64: stored as the text sent, shown back as JSON.
order = {"order": 12345678901234567890, "items": [{"sku": "a-1", "qty": 2}], "note": "caf\u00e9"}
as_json = ok(
    api("messages", "enqueue").sync_detailed(
        client=client,
        body=m.EnqueueRequest(queue="py-json", data=order),
    ),
    m.EnqueueResponse,
)
shown = ok(api("messages", "get_message").sync_detailed(as_json.id, client=client), m.GetMessageResponse)
assert shown.data == order, shown.data
assert json.loads(base64.b64decode(shown.payload)) == order
acked = ok(
    api("queues", "ack").sync_detailed(
        client=client, body=m.AckRequest(lease_ids=[first.lease_id])
    ),
    m.AckResponse,
)
assert acked.acked == 1

# An error is the gRPC status mapped to HTTP, its body naming the field.
bad = api("queues", "ack").sync_detailed(client=client, body=m.AckRequest(lease_ids=["nope"]))
assert bad.status_code == 400, bad.status_code
assert isinstance(bad.parsed, m.ErrorBody), bad.parsed
assert bad.parsed.error.status == "INVALID_ARGUMENT", bad.parsed.error
assert "lease_ids" in bad.parsed.error.message, bad.parsed.error.message

# --- dead letters ------------------------------------------------------------------------
# One attempt: the nack dead-letters it.
dead = ok(
    api("messages", "enqueue").sync_detailed(
        client=client,
        body=m.EnqueueRequest(queue="py-dead", payload=b64("x"), max_attempts=1),
    ),
    m.EnqueueResponse,
)
lease = ok(
    api("queues", "receive").sync_detailed(
        "py-dead", client=client, body=m.ReceiveRequest(max_messages=1, wait_ms="1000")
    ),
    m.ReceiveResponse,
).messages[0]
nacked = ok(
    api("queues", "nack").sync_detailed(
        lease.lease_id, client=client, body=m.NackRequest(reason="bad input")
    ),
    m.NackResponse,
)
assert nacked.dead_lettered is True
listed = ok(
    api("dead_letters", "list_dead_letters").sync_detailed(
        client=client, destination_queue="py-dead", page_size=10
    ),
    m.ListDeadLettersResponse,
)
assert [d.id for d in listed.dead_letters] == [dead.id], listed
assert "bad input" in listed.dead_letters[0].last_error
analysis = ok(
    api("dead_letters", "analyze_dead_letters").sync_detailed(
        client=client, destination_queue="py-dead"
    ),
    m.AnalyzeDeadLettersResponse,
)
assert [a.destination for a in analysis.destinations] == ["queue:py-dead"], analysis
replayed = ok(
    api("dead_letters", "replay_dead_letters").sync_detailed(
        client=client, body=m.ReplayDeadLettersRequest(ids=[dead.id])
    ),
    m.ReplayDeadLettersResponse,
)
assert replayed.replayed == 1, replayed
lease = ok(
    api("queues", "receive").sync_detailed(
        "py-dead", client=client, body=m.ReceiveRequest(max_messages=1, wait_ms="1000")
    ),
    m.ReceiveResponse,
).messages[0]
ok(
    api("queues", "nack").sync_detailed(lease.lease_id, client=client, body=m.NackRequest()),
    m.NackResponse,
)
purged = ok(
    api("dead_letters", "purge_dead_letters").sync_detailed(
        client=client,
        body=m.PurgeDeadLettersRequest(
            filter_=m.DeadLetterFilter(destination=m.Destination(queue="py-dead"))
        ),
    ),
    m.PurgeDeadLettersResponse,
)
assert purged.purged == 1, purged

# --- replay jobs -------------------------------------------------------------------------
# A job over a queue's live message: selected, and skipped when its turn comes.
estimate = ok(
    api("replay_jobs", "create_replay_job").sync_detailed(
        client=client,
        body=m.CreateReplayJobRequest(
            search=m.SearchMessagesRequest(destination=m.Destination(queue="py-json")),
            dry_run=True,
        ),
    ),
    m.CreateReplayJobResponse,
).estimate
assert int(estimate.count) == 1 and int(estimate.live) == 1, estimate
made = ok(
    api("replay_jobs", "create_replay_job").sync_detailed(
        client=client,
        body=m.CreateReplayJobRequest(
            search=m.SearchMessagesRequest(destination=m.Destination(queue="py-json")),
            max_per_s=100.0,
        ),
    ),
    m.CreateReplayJobResponse,
).job
for _ in range(200):
    job = ok(
        api("replay_jobs", "get_replay_job").sync_detailed(made.id, client=client),
        m.GetReplayJobResponse,
    ).job
    if job.state == m.ReplayJobState.REPLAY_JOB_STATE_DONE:
        break
    time.sleep(0.05)
assert job.state == m.ReplayJobState.REPLAY_JOB_STATE_DONE, job
assert int(job.skipped) == 1 and int(job.remaining) == 0, job
jobs = ok(api("replay_jobs", "list_replay_jobs").sync_detailed(client=client), m.ListReplayJobsResponse)
assert [j.id for j in jobs.jobs] == [made.id], jobs
ended = api("replay_jobs", "update_replay_job").sync_detailed(
    made.id,
    client=client,
    body=m.UpdateReplayJobRequest(action=m.ReplayJobAction.REPLAY_JOB_ACTION_CANCEL),
)
assert ended.parsed.error.status == "FAILED_PRECONDITION", ended.parsed

# --- endpoints ---------------------------------------------------------------------------
put = ok(
    api("endpoints", "put_endpoint").sync_detailed(
        "py-hook",
        client=client,
        body=m.Endpoint(url="http://127.0.0.1:9/hook", max_attempts=3),
    ),
    m.PutEndpointResponse,
)
assert put.created is True and put.endpoint.name == "py-hook", put
got = ok(
    api("endpoints", "get_endpoint").sync_detailed("py-hook", client=client),
    m.GetEndpointResponse,
)
assert got.endpoint.max_attempts == 3
names = [
    e.name
    for e in ok(
        api("endpoints", "list_endpoints").sync_detailed(client=client), m.ListEndpointsResponse
    ).endpoints
]
assert "py-hook" in names, names
paused = ok(
    api("endpoints", "pause_endpoint").sync_detailed(
        "py-hook", client=client, body=m.PauseEndpointRequest(reason="maintenance")
    ),
    m.PauseEndpointResponse,
)
assert paused.endpoint.paused is True and paused.endpoint.paused_reason == "maintenance"
resumed = ok(
    api("endpoints", "resume_endpoint").sync_detailed(
        "py-hook", client=client, body=m.ResumeEndpointRequest()
    ),
    m.ResumeEndpointResponse,
)
assert resumed.endpoint.paused is False
ok(api("endpoints", "delete_endpoint").sync_detailed("py-hook", client=client), m.DeleteEndpointResponse)
missing = api("endpoints", "get_endpoint").sync_detailed("py-hook", client=client)
assert missing.status_code == 404, missing.status_code
assert missing.parsed.error.status == "NOT_FOUND", missing.parsed

# --- event types -------------------------------------------------------------------------
# This hookd declares none ([[event_types]] is empty): the list is empty and not strict.
types = ok(
    api("event_types", "list_event_types").sync_detailed(client=client),
    m.ListEventTypesResponse,
)
assert not types.event_types and not types.strict, types

# --- sources -----------------------------------------------------------------------------
secret = "whsec_" + base64.b64encode(b"0123456789abcdef0123456789abcdef").decode()
source = ok(
    api("sources", "put_source").sync_detailed(
        "py-src",
        client=client,
        body=m.Source(scheme="standard-webhooks", secrets=[secret], queue="py-in"),
    ),
    m.PutSourceResponse,
)
assert source.source.path == "/in/py-src", source.source
assert source.source.secrets == [], "secrets are write-only"
ok(api("sources", "get_source").sync_detailed("py-src", client=client), m.GetSourceResponse)
sources = ok(api("sources", "list_sources").sync_detailed(client=client), m.ListSourcesResponse)
assert "py-src" in [s.name for s in sources.sources]
ok(api("sources", "delete_source").sync_detailed("py-src", client=client), m.DeleteSourceResponse)

# --- stats -------------------------------------------------------------------------------
stats = ok(api("stats", "stats").sync_detailed(client=client, page_size=100), m.StatsResponse)
keys = [d.destination for d in stats.destinations]
assert "queue:py-jobs" in keys, keys
assert int(stats.total.in_flight) == 1, stats.total  # the second message, still leased

shutil.rmtree(work)
print("openapi_client.py: every route but /v1/events answered through the generated client")
