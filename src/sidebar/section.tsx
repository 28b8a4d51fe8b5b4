import React from 'react';

/** localStorage key of a section's open/closed state. */
export function sectionKey(id: string): string {
  return `jupyterlab_torchdbg:section:${id}`;
}

/** The DOM event that opens a section from elsewhere (the Now strip's alarm count). */
export const OPEN_SECTION_EVENT = 'torchdbg-open-section';

function readOpen(id: string, fallback: boolean): boolean {
  try {
    const v = window.localStorage.getItem(sectionKey(id));
    return v === null ? fallback : v === 'open';
  } catch {
    return fallback; // storage disabled (private mode, sandboxed frame)
  }
}

function writeOpen(id: string, open: boolean): void {
  try {
    window.localStorage.setItem(sectionKey(id), open ? 'open' : 'closed');
  } catch {
    // not remembered: the section still toggles
  }
}

/**
 * Open the section `id` inside `root` (if closed) and call `then` once its body is
 * rendered (the next frame).
 */
export function openSection(
  root: Element | null,
  id: string,
  then?: () => void
): void {
  const node = root?.querySelector(`[data-section="${id}"]`);
  node?.dispatchEvent(new CustomEvent(OPEN_SECTION_EVENT));
  requestAnimationFrame(() => requestAnimationFrame(() => then?.()));
}

/** A collapsible section of the sidebar; its open/closed state is remembered per id. */
export function Section(props: {
  id: string;
  title: string;
  badge?: string;
  badgeTitle?: string;
  open?: boolean;
  /** A new value (after mount) opens the section again: a new exception shows itself. */
  reopenOn?: string;
  children: React.ReactNode;
}): JSX.Element {
  const { id } = props;
  const [open, setOpenState] = React.useState(() =>
    readOpen(id, props.open ?? true)
  );
  const setOpen = (value: boolean) => {
    setOpenState(value);
    writeOpen(id, value);
  };
  const ref = React.useRef<HTMLElement>(null);
  const seen = React.useRef(props.reopenOn);
  React.useEffect(() => {
    if (props.reopenOn !== undefined && props.reopenOn !== seen.current) {
      setOpen(true);
    }
    seen.current = props.reopenOn;
  }, [props.reopenOn]);
  React.useEffect(() => {
    const node = ref.current;
    const onOpen = () => setOpen(true);
    node?.addEventListener(OPEN_SECTION_EVENT, onOpen);
    return () => node?.removeEventListener(OPEN_SECTION_EVENT, onOpen);
  }, [id]);
  return (
    <section
      ref={ref}
      className="jp-TorchDbg-section"
      data-section={id}
      data-open={open ? 'true' : 'false'}
    >
      <button
        className="jp-TorchDbg-sectionHeader"
        aria-expanded={open}
        onClick={() => setOpen(!open)}
      >
        <span className="jp-TorchDbg-caret">{open ? '▾' : '▸'}</span>
        <span className="jp-TorchDbg-sectionTitle">{props.title}</span>
        {props.badge && (
          <span className="jp-TorchDbg-badge" title={props.badgeTitle}>
            {props.badge}
          </span>
        )}
      </button>
      {open && <div className="jp-TorchDbg-sectionBody">{props.children}</div>}
    </section>
  );
}
