// graphql-codegen's client preset with the API's custom scalars typed: without `scalars` the preset
// emits `unknown` for DateTime and JSON, and `strictScalars` makes a scalar left unmapped an error.
import type { CodegenConfig } from "@graphql-codegen/cli";

const config: CodegenConfig = {
  schema: "../../schema.graphql",  // or the server itself: "http://127.0.0.1:8000/graphql" (introspection)
  documents: ["src/**/*.tsx"],
  generates: {
    "src/gql/": {
      preset: "client",
      config: {
        strictScalars: true,
        scalars: {
          // ISO 8601 in UTC with Z (results); inputs take any zone, or a date alone (its midnight UTC)
          DateTime: "string",
          // any JSON value: the record document, a patch, a change's previous and current values
          JSON: "string | number | boolean | null | { [key: string]: unknown } | unknown[]",
        },
        useTypeImports: true,
      },
    },
  },
};

export default config;
