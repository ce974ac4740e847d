"""The measured streams' own HTTP/1.1 client: pool.py, protocol.py, body.py, client.py."""
