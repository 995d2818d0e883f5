#!/usr/bin/env python3
"""A client that queues requests and then waits to be killed, for cancellation_integration_test:
`count` ModelInfer calls (--mode unary) or one ModelStreamInfer stream carrying `count` requests
(--mode stream), each with one FP32 value for the model's input IN, no deadline. It never reads
an answer: the test kills it with SIGKILL, and the server must notice the connection go.
"""
import argparse
import struct
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--url", required=True)
parser.add_argument("--stubs", required=True)
parser.add_argument("--model", default="held")
parser.add_argument("--mode", choices=["unary", "stream"], required=True)
parser.add_argument("--count", type=int, default=64)
args = parser.parse_args()
sys.path.insert(0, args.stubs)

import grpc  # noqa: E402
import grpc_service_pb2 as pb  # noqa: E402
import grpc_service_pb2_grpc as pb_grpc  # noqa: E402


def request(i):
    req = pb.ModelInferRequest(model_name=args.model, id=str(i))
    tensor = req.inputs.add()
    tensor.name, tensor.datatype = "IN", "FP32"
    tensor.shape.extend([1, 1])
    req.raw_input_contents.append(struct.pack("<f", float(i)))
    return req


channel = grpc.insecure_channel(args.url)
stub = pb_grpc.GRPCInferenceServiceStub(channel)
if args.mode == "unary":
    pending = [stub.ModelInfer.future(request(i)) for i in range(args.count)]
else:
    def messages():
        for i in range(args.count):
            yield request(i)
        while True:  # keep the stream open
            time.sleep(3600)
    responses = stub.ModelStreamInfer(messages())
print("sent", flush=True)
time.sleep(3600)
