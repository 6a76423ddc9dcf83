// A confirm dialog (AppConfirm / FormConfirm / an action's ``confirm``): a modal <dialog>, so focus
// stays inside it and Escape cancels.
import { useEffect, useRef } from "preact/hooks";
import { html } from "../html";

export function Confirm({ text, onAnswer }: { text: string; onAnswer: (ok: boolean) => void }) {
  const ref = useRef<HTMLDialogElement>(null);
  useEffect(() => {
    ref.current?.showModal();
  }, []);
  return html`<dialog ref=${ref} aria-labelledby="confirm-text" onCancel=${() => onAnswer(false)}>
    <p id="confirm-text">${text}</p>
    <div class="buttons">
      <button class="primary" onClick=${() => onAnswer(true)} autofocus>Confirm</button>
      <button onClick=${() => onAnswer(false)}>Back</button>
    </div>
  </dialog>`;
}
