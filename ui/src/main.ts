import { render } from "preact";
import { html } from "./html";
import { Root } from "./views/root";
import { applyTheme, initialTheme } from "./views/shell";
import "./style.css";

applyTheme(initialTheme());
render(html`<${Root} />`, document.getElementById("app") as HTMLElement);
