import React from 'react';

/** Render `code` spans of a kernel sentence as <code> text nodes (never HTML). */
export function RichText(props: { text: string }): JSX.Element {
  const parts = props.text.split('`');
  return (
    <>
      {parts.map((p, i) =>
        i % 2 === 1 ? (
          <code key={i}>{p}</code>
        ) : (
          <React.Fragment key={i}>{p}</React.Fragment>
        )
      )}
    </>
  );
}
