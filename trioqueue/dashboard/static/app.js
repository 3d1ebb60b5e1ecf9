// The dashboard's entry point (see docs/dashboard.md).
import { h, render } from "./vendor/preact.mjs";
import htm from "./vendor/htm.mjs";

const html = htm.bind(h);
render(html`<h1>trioqueue</h1>`, document.getElementById("app"));
