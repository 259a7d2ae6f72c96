"""The protocol edge: the gRPC servicer (grpc_service.py) and the HTTP app (http_app.py), and their converters
between the wire (service_pb2, JSON) and the core's types in `asr_server.messages` (converters.py,
http_converters.py, parameters.py). The only layer that speaks the wire protocol; it calls `core.InferenceCore`.
"""
