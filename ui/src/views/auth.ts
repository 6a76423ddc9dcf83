// First-admin setup (with the workspace's one-time code), password login and provider sign-in.
import { useEffect, useState } from "preact/hooks";
import { Problem, call, session } from "../api";
import { html } from "../html";
import { problemsByPath } from "../logic";
import { forgetSession } from "../store";
import { type Provider, claim, listProviders, startHref } from "../oidc";

type Props = { title: string; onDone: () => void };

function Field(props: { id: string; label: string; type?: string; value: string; error?: string; onInput: (v: string) => void; autocomplete?: string; optional?: boolean }) {
  const errorId = `${props.id}-error`;
  return html`<div class="field">
    <label for=${props.id}>${props.label}</label>
    <input id=${props.id} name=${props.id} type=${props.type ?? "text"} value=${props.value} required=${!props.optional}
      autocomplete=${props.autocomplete} aria-invalid=${props.error ? "true" : undefined}
      aria-describedby=${props.error ? errorId : undefined}
      onInput=${(e: Event) => props.onInput((e.target as HTMLInputElement).value)} />
    ${props.error && html`<p class="error" id=${errorId}>${props.error}</p>`}
  </div>`;
}

function useForm(initial: Record<string, string>) {
  const [values, setValues] = useState(initial);
  const [problem, setProblem] = useState<Problem | null>(null);
  const [busy, setBusy] = useState(false);
  const set = (k: string) => (v: string) => setValues((old) => ({ ...old, [k]: v }));
  return { values, set, problem, setProblem, busy, setBusy };
}

function Providers() {
  const [found, setFound] = useState<Provider[]>([]);
  useEffect(() => {
    void listProviders().then(setFound);
  }, []);
  if (!found.length) return null;
  return html`<nav class="providers" aria-label="Sign in with">
    ${found.map((p) => html`<a class="button primary" href=${startHref(p.name)}>Sign in with ${p.title}</a>`)}
    <p class="muted">or with a password:</p>
  </nav>`;
}

/** After the provider's callback (#/signed-in): the server's session becomes the UI's token. */
export function SignedIn({ onDone }: { onDone: () => void }) {
  const [problem, setProblem] = useState<string | null>(null);
  useEffect(() => {
    claim()
      .then(() => {
        forgetSession();
        onDone();
      })
      .catch((err: unknown) => setProblem(err instanceof Problem ? err.detail : String(err)));
  }, []);
  return html`<main class="auth" id="main" aria-busy=${problem ? "false" : "true"}>
    ${problem ? html`<p class="error" role="alert">${problem} <a href="#/login">Back to sign in</a></p>` : html`<p>Signing in…</p>`}
  </main>`;
}

export function Login({ title, onDone }: Props) {
  const f = useForm({ username: "", password: "" });
  const errors = problemsByPath(f.problem?.errors ?? []);
  const submit = async (e: Event) => {
    e.preventDefault();
    f.setBusy(true);
    try {
      const answer = await call<{ token: string }>("POST", "_ui/login", f.values);
      session.token = answer.data.token;
      forgetSession();
      onDone();
    } catch (err) {
      f.setProblem(err instanceof Problem ? err : new Problem(0, "", String(err)));
    } finally {
      f.setBusy(false);
    }
  };
  return html`<main class="auth" id="main">
    <form class="card" onSubmit=${submit} aria-labelledby="login-title">
      <h1 id="login-title">Sign in to ${title}</h1>
      <${Providers} />
      ${f.problem && !errors.size && html`<p class="error" role="alert">${f.problem.detail}</p>`}
      <${Field} id="username" label="Username" value=${f.values.username} onInput=${f.set("username")} error=${errors.get("username")} autocomplete="username" />
      <${Field} id="password" label="Password" type="password" value=${f.values.password} onInput=${f.set("password")} error=${errors.get("password")} autocomplete="current-password" />
      <button class="primary" type="submit" disabled=${f.busy}>Sign in</button>
      <p class="muted"><a href="#/forgot">Forgot your password?</a></p>
      <p class="muted">First time here? <a href="#/setup">Set up the first admin</a></p>
    </form>
  </main>`;
}

export function Setup({ title, onDone }: Props) {
  const f = useForm({ setup_code: "", username: "", email: "", password: "" });
  const errors = problemsByPath(f.problem?.errors ?? []);
  const submit = async (e: Event) => {
    e.preventDefault();
    f.setBusy(true);
    try {
      const body = { ...f.values, email: f.values.email || undefined };
      const answer = await call<{ token?: string }>("POST", "_ui/setup", body);
      if (answer.data.token) session.token = answer.data.token;
      forgetSession();
      onDone();
    } catch (err) {
      f.setProblem(err instanceof Problem ? err : new Problem(0, "", String(err)));
    } finally {
      f.setBusy(false);
    }
  };
  return html`<main class="auth" id="main">
    <form class="card" onSubmit=${submit} aria-labelledby="setup-title">
      <h1 id="setup-title">Set up ${title}</h1>
      <p class="muted">Create the first administrator with the workspace's one-time setup code (dap dev prints it).</p>
      ${f.problem && !errors.size && html`<p class="error" role="alert">${f.problem.detail}</p>`}
      <${Field} id="setup_code" label="Setup code" value=${f.values.setup_code} onInput=${f.set("setup_code")} error=${errors.get("setup_code")} autocomplete="one-time-code" />
      <${Field} id="username" label="Username" value=${f.values.username} onInput=${f.set("username")} error=${errors.get("username")} autocomplete="username" />
      <${Field} id="email" label="E-mail" type="email" value=${f.values.email} onInput=${f.set("email")} error=${errors.get("email")} autocomplete="email" optional />
      <${Field} id="password" label="Password (8 characters or more)" type="password" value=${f.values.password} onInput=${f.set("password")} error=${errors.get("password")} autocomplete="new-password" />
      <button class="primary" type="submit" disabled=${f.busy}>Create admin</button>
      <p class="muted"><a href="#/login">Back to sign in</a></p>
    </form>
  </main>`;
}

/** A form that POSTs its values and then shows ``done`` (password reset and change). */
function useSubmit(path: string, values: () => Record<string, string>, f: ReturnType<typeof useForm>, after: (data: unknown) => void) {
  return async (e: Event) => {
    e.preventDefault();
    f.setBusy(true);
    try {
      after((await call<unknown>("POST", path, values())).data);
    } catch (err) {
      f.setProblem(err instanceof Problem ? err : new Problem(0, "", String(err)));
    } finally {
      f.setBusy(false);
    }
  };
}

export function Forgot({ title }: { title: string }) {
  const f = useForm({ username: "" });
  const [sent, setSent] = useState(false);
  const errors = problemsByPath(f.problem?.errors ?? []);
  const submit = useSubmit("_ui/password-reset", () => f.values, f, () => setSent(true));
  return html`<main class="auth" id="main">
    <form class="card" onSubmit=${submit} aria-labelledby="forgot-title">
      <h1 id="forgot-title">Reset your password for ${title}</h1>
      ${sent
        ? html`<p role="status">If the account has an e-mail address, a link to choose a new password is on its way. It works once, for an hour.</p>`
        : html`${f.problem && !errors.size && html`<p class="error" role="alert">${f.problem.detail}</p>`}
          <${Field} id="username" label="Username" value=${f.values.username} onInput=${f.set("username")} error=${errors.get("username")} autocomplete="username" />
          <button class="primary" type="submit" disabled=${f.busy}>Send the link</button>`}
      <p class="muted"><a href="#/login">Back to sign in</a></p>
    </form>
  </main>`;
}

export function Reset({ title, token }: { title: string; token: string }) {
  const f = useForm({ new_password: "" });
  const [kept] = useState(token);
  const [done, setDone] = useState(false);
  useEffect(() => {
    history.replaceState(null, "", "#/reset"); // the token leaves the address bar and the history
  }, []);
  const errors = problemsByPath(f.problem?.errors ?? []);
  const submit = useSubmit("_ui/password-reset/confirm", () => ({ token: kept, ...f.values }), f, () => setDone(true));
  return html`<main class="auth" id="main">
    <form class="card" onSubmit=${submit} aria-labelledby="reset-title">
      <h1 id="reset-title">Choose a new password for ${title}</h1>
      ${done
        ? html`<p role="status">Your password is changed. <a href="#/login">Sign in</a></p>`
        : html`${f.problem && !errors.size && html`<p class="error" role="alert">${f.problem.detail}</p>`}
          <${Field} id="new_password" label="New password (8 characters or more)" type="password" value=${f.values.new_password} onInput=${f.set("new_password")} error=${errors.get("new_password")} autocomplete="new-password" />
          <button class="primary" type="submit" disabled=${f.busy}>Set the password</button>`}
    </form>
  </main>`;
}

export function ChangePassword({ title }: { title: string }) {
  const f = useForm({ current_password: "", new_password: "" });
  const [done, setDone] = useState(false);
  const errors = problemsByPath(f.problem?.errors ?? []);
  const submit = useSubmit("_ui/password", () => f.values, f, () => setDone(true));
  return html`<main class="auth" id="main">
    <form class="card" onSubmit=${submit} aria-labelledby="password-title">
      <h1 id="password-title">Change your password for ${title}</h1>
      ${done
        ? html`<p role="status">Your password is changed. <a href="#/">Back</a></p>`
        : html`${f.problem && !errors.size && html`<p class="error" role="alert">${f.problem.detail}</p>`}
          <${Field} id="current_password" label="Current password" type="password" value=${f.values.current_password} onInput=${f.set("current_password")} error=${errors.get("current_password")} autocomplete="current-password" />
          <${Field} id="new_password" label="New password (8 characters or more)" type="password" value=${f.values.new_password} onInput=${f.set("new_password")} error=${errors.get("new_password")} autocomplete="new-password" />
          <button class="primary" type="submit" disabled=${f.busy}>Change password</button>
          <p class="muted"><a href="#/">Back</a></p>`}
    </form>
  </main>`;
}
