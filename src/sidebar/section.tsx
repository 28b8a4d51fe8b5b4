import React from 'react';

/** A collapsible section of the sidebar. */
export function Section(props: {
  id: string;
  title: string;
  badge?: string;
  open?: boolean;
  children: React.ReactNode;
}): JSX.Element {
  const [open, setOpen] = React.useState(props.open ?? true);
  return (
    <section className="jp-TorchDbg-section" data-section={props.id}>
      <button
        className="jp-TorchDbg-sectionHeader"
        aria-expanded={open}
        onClick={() => setOpen(o => !o)}
      >
        <span className="jp-TorchDbg-caret">{open ? '▾' : '▸'}</span>
        {props.title}
        {props.badge && (
          <span className="jp-TorchDbg-badge">{props.badge}</span>
        )}
      </button>
      {open && <div className="jp-TorchDbg-sectionBody">{props.children}</div>}
    </section>
  );
}
