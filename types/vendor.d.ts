// The few parts of the page's libraries that its JavaScript uses, as types for the checker (make lint).
// The libraries themselves are copied beside the page by the build (static/vendor/: markdown-it, DOMPurify,
// highlight.js; pyodide.d.ts has Pyodide's), so web/ imports paths that exist only in static/: each module
// here is matched by the end of its path. Declared by hand from their documentation, only what is called.

// markdown-it (https://markdown-it.github.io/markdown-it/)
declare module "*/vendor/markdown-it.mjs" {
  export interface Token {
    type: string;
    tag: string;
    nesting: number;
    content: string;
    attrs: [string, string][] | null;
    children: Token[] | null;
    attrGet(name: string): string | null;
    attrSet(name: string, value: string): void;
    attrJoin(name: string, value: string): void;
  }
  export interface StateCore {
    tokens: Token[];
    Token: new (type: string, tag: string, nesting: number) => Token;
  }
  export interface Options {
    html?: boolean;
    linkify?: boolean;
    breaks?: boolean;
    highlight?: (code: string, lang: string) => string;
  }
  export interface MarkdownIt {
    options: Options;
    core: { ruler: { push(name: string, rule: (state: StateCore) => void): void } };
    renderer: { render(tokens: Token[], options: Options, env: object): string };
    validateLink: (url: string) => boolean;
    disable(rule: string | string[]): MarkdownIt;
    parse(text: string, env: object): Token[];
  }
  export default function markdownit(options?: Options): MarkdownIt;
}

// DOMPurify (https://github.com/cure53/DOMPurify#readme)
declare module "*/vendor/purify.mjs" {
  interface Config {
    RETURN_DOM_FRAGMENT?: boolean;
    FORBID_TAGS?: string[];
    FORBID_ATTR?: string[];
  }
  const DOMPurify: {
    sanitize(dirty: string, config: Config): DocumentFragment; // the page always asks for a fragment
    addHook(hook: "afterSanitizeAttributes", fn: (node: Element) => void): void;
  };
  export default DOMPurify;
}

// highlight.js (https://highlightjs.readthedocs.io/en/latest/api.html)
declare module "*/vendor/highlight.mjs" {
  const hljs: {
    getLanguage(name: string): object | undefined;
    highlight(code: string, options: { language: string; ignoreIllegals?: boolean }): { value: string };
  };
  export default hljs;
}
