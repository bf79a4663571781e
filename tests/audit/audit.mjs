// Runs graphql-http's auditServer against a GraphQL endpoint and prints every result that is not "ok".
// Exit code 0 only with no error and no warning.
import { auditServer } from 'graphql-http';

const url = process.argv[2];
const results = await auditServer({ url });
const counts = { ok: 0, warn: 0, error: 0 };
for (const result of results) {
  counts[result.status] += 1;
  if (result.status !== 'ok') {
    console.log(`${result.status} ${result.id} ${result.name}: ${result.reason}`);
  }
}
console.log(JSON.stringify(counts));
process.exit(counts.warn || counts.error ? 1 : 0);
