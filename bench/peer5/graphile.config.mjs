// PostGraphile 5 over bench/peer.sql's `peer` schema, with the V4 preset so its schema is the one
// PostGraphile 4 serves (the same queries run against both): no mutations, setof functions without nulls.
import { makeV4Preset } from "postgraphile/presets/v4";
import { PostGraphileAmberPreset } from "postgraphile/presets/amber";
import { makePgService } from "postgraphile/adaptors/pg";

export default {
  extends: [PostGraphileAmberPreset, makeV4Preset({ setofFunctionsContainNulls: false, disableDefaultMutations: true })],
  pgServices: [makePgService({ connectionString: process.env.DATABASE_URL, schemas: ["peer"] })],
  grafserv: { port: Number(process.env.PORT), host: "127.0.0.1", graphqlPath: "/graphql", graphiql: false },
  grafast: { explain: false },
};
