"""The simulated servers' HTTP/1.1 and WebSocket server, and Nomad's rules on the wire: query
parameters, request bodies as Go decodes them, `?filter=` expressions, error answers, and the 500s of
servers in trouble."""
