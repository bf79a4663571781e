"""GraphQL over every transport: HTTP POST and GET (view), subscriptions over WebSocket, SSE and
multipart (live)."""
