// Live updates: one websocket per tab to /{ws}/_ws (docs/events.md "Websocket"). Views subscribe to
// an entity (or one record of it) and hear each delivered event; the socket reconnects by itself
// (backoff 0.5 s … 8 s) and subscribes again with ``after:`` the last seq seen, so the events sent
// while it was away arrive first, with no gap and no repeat.
import { session, workspace } from "./api";

export type LiveEvent = { entity: string; record_id: string; event: string; version?: number; action?: string };
type Listener = (event: LiveEvent) => void;
type Subscription = { entity: string; record: string | null; listeners: Set<Listener> };

const subscriptions = new Map<string, Subscription>();
let socket: WebSocket | null = null;
let lastSeq: number | null = null;
let attempt = 0;
let holdUntil = 0;
let timer: ReturnType<typeof setTimeout> | null = null;
let counter = 0;

function setState(state: "connecting" | "live" | "offline"): void {
  if (typeof document !== "undefined") document.documentElement.dataset.live = state;
}

function send(frame: Record<string, unknown>): void {
  if (socket?.readyState === WebSocket.OPEN) socket.send(JSON.stringify(frame));
}

/** A subscribe frame; ``resume`` (after a reconnect) asks for the events missed since ``lastSeq``. */
function subscribeFrame(id: string, sub: Subscription, resume: boolean): Record<string, unknown> {
  const frame: Record<string, unknown> = { type: "subscribe", id, entity: sub.entity };
  if (sub.record) frame.record = sub.record;
  if (resume && lastSeq !== null) frame.after = lastSeq;
  return frame;
}

function connect(): void {
  if (socket || !session.token || subscriptions.size === 0 || typeof WebSocket === "undefined") return;
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  const url = `${scheme}://${location.host}/${workspace}/_ws?access_token=${encodeURIComponent(session.token)}`;
  setState("connecting");
  const ws = new WebSocket(url);
  socket = ws;
  ws.onopen = () => {
    attempt = 0;
    setState("live");
    for (const [id, sub] of subscriptions) send(subscribeFrame(id, sub, true));
  };
  ws.onmessage = (message) => {
    const frame = JSON.parse(String(message.data)) as { type: string; seq?: number; subscription?: string; event?: LiveEvent; position?: number };
    if (frame.type === "welcome" && lastSeq === null && typeof frame.position === "number") lastSeq = frame.position;
    if (frame.type !== "event" || !frame.event) return;
    if (typeof frame.seq === "number") lastSeq = Math.max(lastSeq ?? 0, frame.seq);
    for (const listener of subscriptions.get(frame.subscription ?? "")?.listeners ?? []) listener(frame.event);
  };
  ws.onclose = () => {
    if (socket === ws) socket = null;
    setState("offline");
    schedule();
  };
}

function schedule(): void {
  if (timer || subscriptions.size === 0) return;
  const delay = Math.max(Math.min(500 * 2 ** attempt, 8000), holdUntil - Date.now());
  attempt += 1;
  timer = setTimeout(() => {
    timer = null;
    connect();
  }, delay);
}

/** Hear the events of ``entity`` (one record of it when ``record``); returns the unsubscribe. */
export function listen(entity: string, record: string | null, listener: Listener): () => void {
  let id = [...subscriptions].find(([, s]) => s.entity === entity && s.record === record)?.[0];
  if (!id) {
    id = `s${++counter}`;
    subscriptions.set(id, { entity, record, listeners: new Set() });
    if (socket?.readyState === WebSocket.OPEN) send(subscribeFrame(id, subscriptions.get(id) as Subscription, false));
    else connect();
  }
  const sub = subscriptions.get(id) as Subscription;
  sub.listeners.add(listener);
  const key = id;
  return () => {
    sub.listeners.delete(listener);
    if (sub.listeners.size === 0) {
      subscriptions.delete(key);
      send({ type: "unsubscribe", id: key });
    }
  };
}

/** Close the socket (sign-out; tests drop it for ``holdMs`` to see the resume). */
export function drop(holdMs = 0): void {
  holdUntil = Date.now() + holdMs;
  socket?.close();
}

if (typeof window !== "undefined") (window as unknown as { dapLive: unknown }).dapLive = { drop };
