import { defineConfig } from "vite";
import react from "@vitejs/plugin-react";

// Two pages, one per client: apollo.html (Apollo Client 4) and urql.html (urql).
export default defineConfig({
  plugins: [react()],
  build: { rollupOptions: { input: { apollo: "apollo.html", urql: "urql.html" } } },
});
