HTTP/1.1 200 OK
date: Mon, 07 Dec 2026 23:43:09 GMT
server: uvicorn
content-type: text/event-stream
cache-control: no-cache, no-transform
x-accel-buffering: no
vary: Origin
x-request-id: 34c7c4baf07d968f8dfd780a53815e8a
transfer-encoding: chunked

