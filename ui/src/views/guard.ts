// One block's failure stays in its block: the error is shown there, the rest of the page works.
import type { ComponentChildren } from "preact";
import { useErrorBoundary } from "preact/hooks";
import { html } from "../html";

export function Guard({ children }: { children: ComponentChildren }) {
  const [error, reset] = useErrorBoundary((e: unknown) => console.error(e));
  if (error)
    return html`<div class="error" role="alert"><p>This part of the page failed: ${String((error as Error).message ?? error)}</p>
      <button onClick=${reset}>Try again</button></div>`;
  return html`${children}`;
}
