// ESLint flat config: typescript-eslint + prettier, as the extension template does.
import js from '@eslint/js';
import prettier from 'eslint-plugin-prettier/recommended';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  {
    ignores: [
      'node_modules/**',
      'lib/**',
      'coverage/**',
      'jupyterlab_torchdbg/labextension/**',
      'ui-tests/node_modules/**',
      'ui-tests/test-results/**',
      'ui-tests/playwright-report/**',
      '.venv/**',
      '**/*.js',
      '**/*.mjs'
    ]
  },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  prettier,
  {
    files: ['**/*.ts', '**/*.tsx'],
    rules: {
      '@typescript-eslint/naming-convention': [
        'error',
        {
          selector: 'interface',
          format: ['PascalCase'],
          custom: { regex: '^I[A-Z]|Event$', match: true }
        }
      ],
      '@typescript-eslint/no-unused-vars': ['warn', { args: 'none' }],
      '@typescript-eslint/no-explicit-any': 'off',
      '@typescript-eslint/no-namespace': 'off',
      '@typescript-eslint/no-use-before-define': 'off',
      curly: ['error', 'all'],
      eqeqeq: 'error',
      'prefer-arrow-callback': 'error',
      'no-restricted-properties': [
        'error',
        {
          property: 'innerHTML',
          message: 'Never innerHTML: render kernel strings as text (S1).'
        },
        {
          property: 'outerHTML',
          message: 'Never outerHTML: render kernel strings as text (S1).'
        }
      ],
      'react/no-danger': 'off'
    }
  }
);
