#!/usr/bin/env python3
"""A gRPC client of cuzk.v1.ProvingEngine that is not the daemon's own code:
its stubs are generated here, at test time, from prover/proto by grpcio-tools
(PyPI), as any other toolchain would generate them.

Usage: curio_client.py PROTO_DIR TARGET PLAN.json RESULTS.json

TARGET is a gRPC target (`unix:///path/to.sock` or `127.0.0.1:PORT`). The
plan is a list of steps; each step is a list of calls made at once (threads),
each call `{"rpc": "Prove", "request": {...}, "timeout_s": 600}` with the
request in protobuf's JSON mapping (bytes as base64) and an optional
`"delay_s"` before it starts. The results file gets, per step, per call,
`{"code": "OK" | status name, "details": str, "response": {...} | null}`.
"""
import json
import os
import sys
import tempfile
import threading
import time

MAX_MESSAGE = 256 << 20


def stubs(proto_dir):
    from grpc_tools import protoc
    import importlib

    out = tempfile.mkdtemp(prefix="cuzk-stubs-")
    rc = protoc.main([
        "grpc_tools.protoc",
        f"-I{proto_dir}",
        f"--python_out={out}",
        f"--grpc_python_out={out}",
        os.path.join(proto_dir, "cuzk", "v1", "proving.proto"),
    ])
    if rc != 0:
        sys.exit(f"protoc failed ({rc})")
    sys.path.insert(0, out)
    pb = importlib.import_module("cuzk.v1.proving_pb2")
    grpc_pb = importlib.import_module("cuzk.v1.proving_pb2_grpc")
    return pb, grpc_pb


def main():
    proto_dir, target, plan_path, results_path = sys.argv[1:5]
    import grpc
    from google.protobuf import json_format

    pb, grpc_pb = stubs(proto_dir)
    options = [
        ("grpc.max_send_message_length", MAX_MESSAGE),
        ("grpc.max_receive_message_length", MAX_MESSAGE),
    ]
    if target.startswith("unix:"):
        # gRPC's C core sends the socket path, percent-encoded, as the
        # :authority of a unix-socket call, which the server's HTTP/2 layer
        # refuses as malformed; Go's gRPC (Curio's) sends "localhost".
        options.append(("grpc.default_authority", "localhost"))
    channel = grpc.insecure_channel(target, options=options)
    stub = grpc_pb.ProvingEngineStub(channel)
    requests = {
        "SubmitProof": pb.SubmitProofRequest,
        "AwaitProof": pb.AwaitProofRequest,
        "Prove": pb.ProveRequest,
        "CancelProof": pb.CancelProofRequest,
        "GetStatus": pb.GetStatusRequest,
        "GetMetrics": pb.GetMetricsRequest,
        "PreloadSRS": pb.PreloadSrsRequest,
        "EvictSRS": pb.EvictSrsRequest,
    }
    with open(plan_path) as f:
        plan = json.load(f)

    def call(c, slot):
        time.sleep(c.get("delay_s", 0))
        req = json_format.ParseDict(c.get("request", {}), requests[c["rpc"]]())
        started = time.monotonic()
        try:
            resp = getattr(stub, c["rpc"])(req, timeout=c.get("timeout_s", 600))
            slot.update(code="OK", details="", response=json_format.MessageToDict(
                resp, preserving_proto_field_name=True))
        except grpc.RpcError as e:
            slot.update(code=e.code().name, details=e.details() or "", response=None)
        slot["seconds"] = time.monotonic() - started

    results = []
    for step in plan:
        slots = [{} for _ in step]
        threads = [threading.Thread(target=call, args=(c, s)) for c, s in zip(step, slots)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        results.append(slots)
    with open(results_path, "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main()
