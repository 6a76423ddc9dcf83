import { useEffect, useRef, useState } from "preact/hooks";
import { Problem } from "./api";
import { type LiveEvent, listen } from "./live";

export type Loaded<T> = { value: T | null; error: Problem | Error | null; loading: boolean };

/** Run ``load`` when ``deps`` change; the latest answer wins. */
export function useLoad<T>(load: () => Promise<T>, deps: unknown[]): Loaded<T> & { reload: () => void } {
  const [state, setState] = useState<Loaded<T>>({ value: null, error: null, loading: true });
  const [tick, setTick] = useState(0);
  useEffect(() => {
    let live = true;
    setState((s) => ({ ...s, loading: true }));
    load().then(
      (value) => live && setState({ value, error: null, loading: false }),
      (error: Error) => live && setState({ value: null, error, loading: false }),
    );
    return () => {
      live = false;
    };
  }, [...deps, tick]);
  return { ...state, reload: () => setTick((t) => t + 1) };
}

/** Run ``onEvent`` for each live event of ``entity`` (of one record when ``record``), batched: many
 * events in 150 ms run it once. Nothing when ``entity`` is null. */
export function useLive(entity: string | null, record: string | null, onEvent: (e: LiveEvent) => void): void {
  const latest = useRef(onEvent);
  latest.current = onEvent;
  useEffect(() => {
    if (!entity) return;
    let pending: ReturnType<typeof setTimeout> | null = null;
    let last: LiveEvent | null = null;
    const stop = listen(entity, record, (e) => {
      last = e;
      pending ??= setTimeout(() => {
        pending = null;
        if (last) latest.current(last);
      }, 150);
    });
    return () => {
      stop();
      if (pending) clearTimeout(pending);
    };
  }, [entity, record]);
}
