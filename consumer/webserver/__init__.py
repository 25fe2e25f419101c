"""The bounded HTTP/1.1 server that the health endpoints and the inspector are served from
(``consumer.webserver.server``): one small server of our own, with limits on request size,
header count and time, so a slow or hostile client cannot hold a service's event loop.
"""
