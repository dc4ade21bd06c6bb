// @ts-check
// A browser File's bytes read straight into Pyodide's wasm memory: the model's weights go from the file
// to their numpy array in one copy, with no Python bytes between. Python imports this as the module
// `pyengine_file` (pyodide_boot.js registers it) and reads through Pyodide's own copies where it is missing.

// Make `import pyengine_file` work in this Pyodide: read_into(reader, blob, address) puts the bytes of
// `blob` (a File's slice) at byte `address` of the memory and returns how many there were. `reader` is a
// FileReaderSync (or a test's stand-in with readAsArrayBuffer(blob) -> ArrayBuffer). The address comes
// from Python as a plain number: `>>> 0` keeps it unsigned past 2 GiB, where Pyodide's own copies read
// it as a negative i32.
export function registerFileRead(pyodide) {
  pyodide.registerJsModule("pyengine_file", {
    read_into(reader, blob, address) {
      const bytes = new Uint8Array(reader.readAsArrayBuffer(blob));
      pyodide._module.HEAPU8.set(bytes, address >>> 0);
      return bytes.length;
    },
  });
}
