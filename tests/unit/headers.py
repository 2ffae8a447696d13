"""Request headers as node.server makes them, for calling an API module's handle directly."""
from node.security.session import PLAINTEXT_LISTENER, Session
from node.server import RequestHeader


def request_header(version: int, client_id: str = "test-client") -> RequestHeader:
    """A header of a request at `version` from a PLAINTEXT client (User:ANONYMOUS)."""
    return RequestHeader(api_key=-1, api_version=version, correlation_id=0, client_id=client_id,
                         client_host="/127.0.0.1", session=Session.opened(PLAINTEXT_LISTENER, "127.0.0.1"))
