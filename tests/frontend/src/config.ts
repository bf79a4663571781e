// The API's origin, given at build time (the app is served from another origin).
export const API = import.meta.env.VITE_PITH_API as string;
export const PAPER = (import.meta.env.VITE_PITH_PAPER as string) || "2402.15627";
