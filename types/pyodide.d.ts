// The parts of Pyodide's JavaScript API that the workers use, as types for the checker (make lint). The
// build copies Pyodide beside the page (static/pyodide/), so web/ imports a path that exists only in static/:
// the module is matched by the end of its path. Declared by hand from its documentation, only what is called.

// Pyodide (https://pyodide.org/en/stable/usage/api/js-api.html): a Python object seen from JS is a proxy.
declare module "*/pyodide/pyodide.mjs" {
  export interface PyProxy {
    [name: string]: any;
    toJs(options?: { dict_converter?: (entries: Iterable<[string, any]>) => any }): any;
  }
  export interface PyodideAPI {
    FS: { writeFile(path: string, data: Uint8Array): void };
    _module: { HEAPU8: Uint8Array };
    loadPackage(names: string[], options?: { messageCallback?: (message: string) => void }): Promise<unknown>;
    pyimport(name: string): PyProxy;
    registerJsModule(name: string, module: object): void;
    setInterruptBuffer(buffer: Int32Array): void;
  }
  export function loadPyodide(options: { indexURL: string; env?: Record<string, string> }): Promise<PyodideAPI>;
}
