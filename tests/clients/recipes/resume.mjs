// graphql-ws: a subscription that survives a server restart (close 1012) and misses nothing.
// graphql-ws sends the same payload again on every reconnect: `after` kept at the last cursor received
// makes each retry resume there (the server replays what was committed meanwhile, then goes on live).
export const RESUMING = {
  retryAttempts: Infinity,  // a restart or a deploy can outlast the default 5 tries
  shouldRetry: () => true,
  retryWait: (tries) => new Promise((resolve) => setTimeout(resolve, Math.min(500 * 2 ** tries, 5000))),
};

export function subscribeResuming(client, { query, variables }, sink) {
  const payload = { query, variables: { ...variables } };
  return client.subscribe(payload, {
    ...sink,
    next(result) {
      const event = result.data && Object.values(result.data)[0];
      if (event?.cursor) payload.variables.after = event.cursor;
      sink.next(result);
    },
  });
}
// const client = createClient({ url: "ws://127.0.0.1:8000/graphql", ...RESUMING });
// subscribeResuming(client, { query, variables: { id, after: data.changeCursor } }, { next, error, complete });
