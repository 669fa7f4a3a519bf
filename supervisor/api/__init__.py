"""Poseidon's HTTP/WebSocket API on starlette, its OpenAPI document, the standby's answer, and the HTTP
server it runs on."""
