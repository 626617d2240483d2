// ESLint flat config for the dashboard's page modules (run by `make lint` and `make test`).
import js from "@eslint/js";
import globals from "globals";

export default [
  js.configs.recommended,
  {
    files: ["src/**/*.js"],
    languageOptions: {
      ecmaVersion: 2022,
      sourceType: "module",
      globals: {
        ...globals.browser,
        // Loaded by <script> tags from the npm packages (see topoweb/ui/staticfinders.py).
        cytoscape: "readonly",
        cytoscapeFcose: "readonly",
        uPlot: "readonly",
      },
    },
    rules: {
      "no-unused-vars": ["error", { args: "after-used", argsIgnorePattern: "^_" }],
      eqeqeq: ["error", "smart"],
      "prefer-const": "error",
      "no-var": "error",
    },
  },
];
